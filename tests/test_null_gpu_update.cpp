// tests/test_null_gpu_update.cpp — a CUDA step's update on the null driver: new parameters and
// optimizer state stored over the old ones (donated inputs), and what may not be
#include "env_override.hpp"
#include "jit/backend/cuda/cuda_device.hpp"
#include "jit/backend/cuda/gpu_executable.hpp"
#include "null_gpu_helpers.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

namespace sinter::testing {
namespace {

struct UpdateRun {
  StepMemory planned;
  NullGpuCounters steady{};
  TrainStep::ResidentBytes resident;
};

/// Four steady steps of an MLP's AdamW step (after two direct runs and the first graph), with
/// SINTER_UPDATE_IN_PLACE at `in_place`.
UpdateRun adamw_steps(const char* in_place) {
  EnvOverride setting("SINTER_UPDATE_IN_PLACE", in_place);
  constexpr int64_t width = 1024, batch = 16;
  std::vector<double> xs(batch * width), ys(batch);
  for (std::size_t i = 0; i < xs.size(); ++i)
    xs[i] = static_cast<double>(i % 13) * 0.1 - 0.6;
  for (std::size_t i = 0; i < ys.size(); ++i)
    ys[i] = static_cast<double>(i % 10);
  HostTensor x = HostTensor::from_doubles(DType::f32, {batch, width}, xs);
  HostTensor y = HostTensor::from_doubles(DType::i32, {batch}, ys);
  Init init(7);
  Mlp model(width, init);
  auto step = compile_step(
      model, [](Mlp& m, Var in, Var labels) { return cross_entropy_loss(m(in), labels); },
      adamw{.lr = 1e-3});
  HostTensor example[] = {x, y};
  UpdateRun out;
  out.planned = step.plan_memory(example);
  for (int i = 0; i < 3; ++i)
    step(x, y);
  reset_counters();
  for (int i = 0; i < 4; ++i)
    step(x, y);
  out.steady = counters();
  out.resident = step.runtime().resident_bytes();
  return out;
}

TEST_CASE("null gpu: a step stores its new parameters and AdamW state over the old ones: no "
          "buffers of their own, no copies after the step",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  CudaDevice::get(0).gemm_workspace();
  const UpdateRun stored = adamw_steps("1"), copied = adamw_steps("0");
  const int64_t state = stored.resident.parameters + stored.resident.optimizer_state;
  INFO("outputs planned " << stored.planned.outputs << " (stored over the inputs) and "
                          << copied.planned.outputs << " (own buffers); state " << state);
  // Written into buffers of their own, the four parameters and their two moments are copied
  // back over the inputs after every step; stored over the inputs, nothing is.
  CHECK(copied.steady.copies_device_to_device >= 4 * 12);
  CHECK(copied.steady.bytes_device_to_device >= static_cast<uint64_t>(4 * state));
  CHECK(stored.steady.copies_device_to_device == 0);
  CHECK(stored.steady.graph_nodes_launched + 4 * 12 <= copied.steady.graph_nodes_launched);
  // And the plan holds no second copy of the state (outputs are planned in whole pages).
  CHECK(copied.planned.outputs - stored.planned.outputs >=
        state - static_cast<int64_t>(device_page_bytes));
  CHECK(stored.planned.outputs < static_cast<int64_t>(2 * device_page_bytes));
}

TEST_CASE("null gpu: an input the step stores a value over is never resident, and is carried "
          "only from that value",
          "[null-gpu]") {
  TempDir dir("sinter-null-donated");
  KernelCache cache(dir.path);
  Graph g;
  Value w = input(g, "w", {DType::f32, {1024}});
  g.add_output("new.w", (w * 0.5).id);
  g.add_output("twice.w", (w * 2.0).id);
  g.donate(0, 0);
  GpuExecutable exe(g, CudaDevice::get(0), cache);
  std::vector<std::size_t> resident{0};
  CHECK_THROWS_WITH(exe.set_resident(resident), Catch::Contains("cannot be resident"));
  std::vector<std::pair<std::size_t, std::size_t>> other{{0, 1}};
  CHECK_THROWS_WITH(exe.set_carried(other), Catch::Contains("carry it from that output"));
  std::vector<std::pair<std::size_t, std::size_t>> same{{0, 0}};
  CHECK_NOTHROW(exe.set_carried(same));
}

} // namespace
} // namespace sinter::testing
