// tests/test_null_gpu_assembly.cpp — a step's kernels assembled in the process by libnvJitLink
// (SINTER_PTX_ASSEMBLER=jitlink): real cubins, loaded and run by the null driver
#include "dsl/sinter.hpp"
#include "env_override.hpp"
#include "null_gpu_helpers.hpp"

#include "jit/backend/cuda/cuda_device.hpp"

#include <catch2/catch.hpp>

#include <optional>

#include <unistd.h>

namespace sinter::testing {
namespace {

TEST_CASE("null gpu: with SINTER_PTX_ASSEMBLER=jitlink a step's kernels are cubins made in the "
          "process, which the null driver loads and runs; by default its own cuLink* assembles",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  CudaDevice::get(0).gemm_workspace(); // the driver loaded, the device's own work done
  HostTensor x = HostTensor::from_doubles(DType::f32, {16, 88}, std::vector<double>(16 * 88, 0.25));
  HostTensor y = HostTensor::from_doubles(DType::i32, {16}, std::vector<double>(16, 3));
  // Logits scaled by a constant of each run's own: kernels no other step has, so none is in
  // this process's memory to be reused (kernels take their sizes as parameters); and of this
  // process's own, so that none is in the disk cache from an earlier run of this test either.
  const double own = static_cast<double>(::getpid() % 4096) / 65536.0;
  auto train = [&](std::optional<std::string> assembler, double scale) {
    EnvOverride chosen("SINTER_PTX_ASSEMBLER", assembler);
    Init init(5);
    Mlp model(88, init);
    reset_counters();
    auto step = compile_step(
        model,
        [scale](Mlp& m, Var in, Var labels) { return cross_entropy_loss(m(in) * scale, labels); },
        adamw{.lr = 1e-3});
    for (int i = 0; i < 3; ++i)
      step(x, y);
    return counters();
  };
  NullGpuCounters jitlink = train("jitlink", 0.8125 + own);
  CHECK(jitlink.ptx_assembled == 0);                      // the driver's linker never ran
  CHECK(jitlink.modules_loaded > 0);                      // the step's new kernels
  CHECK(jitlink.cubins_loaded == jitlink.modules_loaded); // each one a real cubin
  CHECK(jitlink.kernel_launches + jitlink.graph_nodes_launched > 0);
  // Unasked, the null driver's own cuLink* assembles (its container marks pointer parameters).
  NullGpuCounters linked = train(std::nullopt, 0.6875 + own);
  CHECK(linked.ptx_assembled == linked.modules_loaded);
  CHECK(linked.modules_loaded > 0);
  CHECK(linked.cubins_loaded == 0);
  EnvOverride unset("SINTER_PTX_ASSEMBLER", std::nullopt);
  CHECK(ptx_assembler() == nullptr);
}

} // namespace
} // namespace sinter::testing
