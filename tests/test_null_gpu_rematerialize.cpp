// tests/test_null_gpu_rematerialize.cpp — the backward's GEMM operands on the null driver: kept
// where the step fits the device, recomputed to fit a smaller budget
#include "env_override.hpp"
#include "null_gpu_helpers.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>

namespace sinter::testing {
namespace {

TEST_CASE("null gpu: a GPT's step keeps the layernorm and GELU outputs its backward's GEMMs "
          "read where it fits the device, and recomputes them to fit SINTER_MEMORY_LIMIT",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  Init init(5);
  constexpr int64_t batch = 32, context = 128, vocab = 256;
  GPT model(GPTConfig{.vocab = vocab, .context = context, .dim = 256, .depth = 2, .heads = 4},
            init);
  auto make_step = [&] {
    return compile_step(model, [](GPT& m, Var x, Var y) { return cross_entropy_mean(m(x), y); },
                        adamw{}, {.batch_names = {"ids", "next"}, .amp = amp::bf16});
  };
  std::vector<double> ids(batch * context);
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<double>(i * 7 % vocab);
  HostTensor x = HostTensor::from_doubles(DType::i32, {batch, context}, ids);
  HostTensor example[] = {x, x};
  auto planning = make_step();
  // The null H100's 80 GB: every operand kept, the plan's largest.
  StepMemory kept = planning.plan_memory(example);
  // A limit under that plan: the operands are recomputed, and the plan fits under it.
  EnvOverride limit("SINTER_MEMORY_LIMIT", std::to_string(kept.total() - 1));
  StepMemory recomputed = planning.plan_memory(example);
  INFO("kept " << kept.total() << " bytes, recomputed " << recomputed.total());
  CHECK(recomputed.arena < kept.arena);
  CHECK(recomputed.total() <= kept.total() - 1);
  auto step = make_step();
  CHECK_NOTHROW(step(x, x));
  CHECK(std::isfinite(step(x, x).loss.value()));
}

} // namespace
} // namespace sinter::testing
