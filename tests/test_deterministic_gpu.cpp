// tests/test_deterministic_gpu.cpp — reproducible GPU steps (SINTER_DETERMINISTIC=1): scatters
// without atomics, whatever order the blocks run in, and attention backwards off cuDNN
#include "capture_stderr.hpp"
#include "dsl/sinter.hpp"
#include "env_override.hpp"
#include "null_gpu_helpers.hpp"
#include "ptx_check.hpp"
#include "scatter_case.hpp"

#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/interp/interpreter.hpp"
#include "jit/passes/runtime_rows.hpp"
#include "jit/pipeline/pipeline.hpp"
#include "tests/support/nvptx_emulator.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace sinter::testing {
namespace {

/// Runs `optimized` in the emulator with its blocks in `order`, and puts the order back.
std::vector<HostTensor> emulate_in_order(const Graph& optimized, std::span<const HostTensor> inputs,
                                         EmulatedBlockOrder order) {
  set_emulated_block_order(order);
  try {
    std::vector<HostTensor> out = emulate_nvptx_step(optimized, inputs, 90);
    set_emulated_block_order(EmulatedBlockOrder::ascending);
    return out;
  } catch (...) {
    set_emulated_block_order(EmulatedBlockOrder::ascending);
    throw;
  }
}

GpuStrategy scatter_strategy(const Graph& g) {
  FusionPlan plan = fuse(g);
  for (const Kernel& k : plan.kernels)
    if (k.kind == KernelKind::scatter_add) return gpu_launch(g, k).strategy;
  FAIL("no scatter kernel");
  return GpuStrategy::elementwise;
}

TEST_CASE("emulated CUDA: under SINTER_DETERMINISTIC=1 a scatter adds each row's updates in "
          "position order, the same bits whatever order the blocks run in",
          "[emulated]") {
  // 37 rows: a block each; 1100 rows: two a block (gpu_owned_scatter_blocks). Widths that are
  // not a multiple of the block's threads; more positions than one tile.
  for (auto [positions, width, rows] : {std::array<int64_t, 3>{700, 70, 37}, {600, 3, 1100}}) {
    INFO(positions << " positions of " << width << " into " << rows << " rows");
    ScatterCase c(positions, width, rows, DType::f32);
    HostTensor want = c.in_order();
    {
      EnvOverride deterministic("SINTER_DETERMINISTIC", "1");
      CHECK(scatter_strategy(c.graph) == GpuStrategy::owned_scatter);
      for (EmulatedBlockOrder order :
           {EmulatedBlockOrder::ascending, EmulatedBlockOrder::descending}) {
        std::vector<HostTensor> got = emulate_in_order(c.graph, c.inputs, order);
        CHECK(same_bits(got[0], want));
      }
    }
    // By default the adds are atomic: blocks run the other way round add in another order, and
    // the sums come out other bits (what the check above would see if they were still atomic).
    EnvOverride by_default("SINTER_DETERMINISTIC", std::nullopt);
    CHECK(scatter_strategy(c.graph) == GpuStrategy::atomic_scatter);
    if (rows < 100) {
      std::vector<HostTensor> backwards =
          emulate_in_order(c.graph, c.inputs, EmulatedBlockOrder::descending);
      CHECK_FALSE(same_bits(backwards[0], want));
    }
  }
}

TEST_CASE("emulated CUDA: a bf16 scatter owns its rows (no atomics on 16-bit words) and rounds "
          "after each add in position order, as one thread would",
          "[emulated]") {
  ScatterCase c(300, 40, 23, DType::bf16);
  CHECK(scatter_strategy(c.graph) == GpuStrategy::owned_scatter);
  HostTensor want = c.in_order();
  for (EmulatedBlockOrder order : {EmulatedBlockOrder::ascending, EmulatedBlockOrder::descending})
    CHECK(same_bits(emulate_in_order(c.graph, c.inputs, order)[0], want));
}

TEST_CASE("emulated CUDA: under SINTER_DETERMINISTIC=1 an embedding's training gradients are the "
          "same bits whatever order the blocks run in (the table's scatter takes its row count "
          "as a parameter)",
          "[emulated]") {
  EnvOverride deterministic("SINTER_DETERMINISTIC", "1");
  constexpr int64_t batch = 6, length = 50, vocab = 13, width = 24;
  Graph g;
  Value ids = input(g, "ids", {DType::i32, {batch, length}});
  Value table = input(g, "table", {DType::f32, {vocab, width}});
  Value w = input(g, "w", {DType::f32, {width, 1}});
  Value h = tanh(reshape(gather(table, ids), {batch * length, width}));
  g.add_output("loss", mean(matmul(h, w) * matmul(h, w)).id);
  Graph step =
      Pipeline::standard(AutodiffOptions{{"table", "w"}, 0}).run(g, DumpSelection(""), std::cerr);
  std::mt19937 random(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<HostTensor> inputs;
  for (const NamedValue& in : step.inputs()) {
    const TensorType& t = step.type(in.id);
    std::vector<double> values(static_cast<std::size_t>(numel(t.shape)));
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] =
          t.dtype == DType::i32 ? static_cast<double>((i * i + 3 * i) % vocab) : normal(random);
    inputs.push_back(HostTensor::from_doubles(t.dtype, t.shape, values));
  }
  CHECK(scatter_strategy(step) == GpuStrategy::owned_scatter);
  { // the table's scatter is compiled once for every batch size, as the CUDA backend would
    CompileRun run("rows", false, DumpSelection(""));
    Prepared prepared = prepare_for_nvptx(step, 90, run);
    const FusionPlan& plan = prepared.fusion;
    auto scatter = std::find_if(plan.kernels.begin(), plan.kernels.end(),
                                [](const Kernel& k) { return k.kind == KernelKind::scatter_add; });
    REQUIRE(scatter != plan.kernels.end());
    std::optional<RuntimeRowsKernel> rows = RuntimeRowsKernel::of(plan, *scatter);
    REQUIRE(rows);
    CHECK(rows_kernel_emits(*rows, gpu_launch(*plan.graph, *scatter)));
  }
  std::vector<HostTensor> forwards = emulate_in_order(step, inputs, EmulatedBlockOrder::ascending);
  std::vector<HostTensor> backwards =
      emulate_in_order(step, inputs, EmulatedBlockOrder::descending);
  REQUIRE(forwards.size() == step.outputs().size());
  std::vector<F64Tensor> values;
  for (const HostTensor& t : inputs)
    values.push_back(F64Tensor{t.shape(), t.to_doubles()});
  std::vector<F64Tensor> want = interpret(step, values);
  for (std::size_t i = 0; i < forwards.size(); ++i) {
    INFO(step.outputs()[i].name);
    CHECK(same_bits(forwards[i], backwards[i]));
    std::vector<double> got = forwards[i].to_doubles();
    double largest = 0;
    for (std::size_t e = 0; e < got.size(); ++e)
      largest = std::max(largest,
                         std::abs(got[e] - want[i].data[e]) / (1e-3 + std::abs(want[i].data[e])));
    CHECK(largest < 1e-4);
  }
}

TEST_CASE("gpu: an owned scatter has no atomics, lists its hits with warp ballots and assembles "
          "for sm_80 and sm_90",
          "[ptx]") {
  EnvOverride deterministic("SINTER_DETERMINISTIC", "1");
  ScatterCase c(64, 16, 100, DType::f32);
  FusionPlan plan = fuse(c.graph);
  const Kernel& scatter = plan.kernels.back();
  GpuLaunch launch = gpu_launch(c.graph, scatter);
  CHECK(launch.strategy == GpuStrategy::owned_scatter);
  CHECK_FALSE(launch.zero_output_first); // each block clears the rows it owns
  CHECK(launch.blocks == 100);
  std::string ptx = nvptx_target(90).compile(plan, scatter, "k");
  CHECK(ptx.find("atom.") == std::string::npos);
  CHECK(ptx.find("vote.sync.ballot") != std::string::npos);
  CHECK(check_ptx(c.graph) == 1);
}

TEST_CASE("null gpu: under SINTER_DETERMINISTIC=1 a GPT's attention backwards run on sinter's "
          "kernels, saying why, and SINTER_ATTENTION=cudnn with it is an error",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  EnvOverride deterministic("SINTER_DETERMINISTIC", "1");
  constexpr int64_t context = 32, vocab = 64;
  // Each run at a batch of its own, so that it compiles (and chooses its attention) anew.
  auto train = [&](int64_t batch) {
    std::vector<double> tokens(static_cast<std::size_t>(batch * context));
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<double>(i * 5 % vocab);
    HostTensor x = HostTensor::from_doubles(DType::i32, {batch, context}, tokens);
    Init init(4);
    GPT model(GPTConfig{.vocab = vocab, .context = context, .dim = 64, .depth = 1, .heads = 2},
              init);
    auto step = compile_step(
        model, [](GPT& m, Var in, Var next) { return cross_entropy_mean(m(in), next); }, adamw{},
        {.batch_names = {"ids", "next"}, .amp = amp::bf16});
    step(x, x);
  };
  std::string text = capture_stderr([&] { train(2); });
  INFO(text);
  CHECK(text.find("bf16 causal backward on cuda: nvptx (SINTER_DETERMINISTIC=1)") !=
        std::string::npos);
  EnvOverride cudnn("SINTER_ATTENTION", "cudnn");
  CHECK_THROWS_WITH(train(3), Catch::Contains("SINTER_DETERMINISTIC=1") &&
                                  Catch::Contains("SINTER_ATTENTION=cudnn"));
}

} // namespace
} // namespace sinter::testing
