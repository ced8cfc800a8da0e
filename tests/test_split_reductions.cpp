// tests/test_split_reductions.cpp — long column reductions split into partial sums and a short
// sum: how many row groups, the same results in the NVPTX emulator, and the predicted gain
#include "jit/backend/cuda/cost_model.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/passes/passes.hpp"
#include "jit/pipeline/pipeline.hpp"
#include "jit/profile/kernel_costs.hpp"
#include "tests/support/nvptx_emulator.hpp"

#include "backend_check.hpp"
#include "env_override.hpp"
#include "model_launches.hpp"

#include <catch2/catch.hpp>

#include <iostream>
#include <random>

namespace sinter::testing {
namespace {

std::size_t count_reductions(const Graph& g) {
  std::size_t n = 0;
  for (ValueId id = 0; id < g.size(); ++id)
    n += g.node(id).op == OpId::reduce_sum || g.node(id).op == OpId::reduce_max;
  return n;
}

TEST_CASE("split reductions: enough row groups for 256 blocks of 32 columns, dividing the rows",
          "[split-reductions]") {
  constexpr int64_t mb = 1 << 20;
  CHECK(column_reduction_splits(8192, 768, 12 * mb) == 16);   // GPT-2's bias gradients: 384 blocks
  CHECK(column_reduction_splits(8192, 3072, 48 * mb) == 4);   // the MLP's: 384 blocks
  CHECK(column_reduction_splits(8192, 50304, 800 * mb) == 1); // the logits': 1572 blocks already
  CHECK(column_reduction_splits(50432, 384, 37 * mb) == 32);  // ViT-S over 256 × 197 tokens
  CHECK(column_reduction_splits(256, 512, mb) == 1);          // a small batch: one pass
  CHECK(column_reduction_splits(8190, 768, 12 * mb) == 2);    // only what divides the rows
  CHECK(column_reduction_splits(8192, 768, 1024) == 1);       // too small to be worth a launch
}

TEST_CASE("split reductions: with 16 bytes of columns a lane, a block covers 8 bf16 or 4 f32 "
          "columns a lane, and the splits aim at 1024 blocks",
          "[split-reductions]") {
  constexpr int64_t mb = 1 << 20;
  ColumnSplitOptions gpu{.lane_bytes = 16, .target_blocks = 1024};
  // GPT-2's bias gradients, bf16 loaded: 3 blocks of 256 columns want 342 groups; 64 rows each
  // at least leaves 128 (384 blocks).
  CHECK(column_reduction_splits(8192, 768, 12 * mb, gpu, 2) == 128);
  // The MLP's [8192, 3072]: 12 blocks, 128 groups (1536 blocks).
  CHECK(column_reduction_splits(8192, 3072, 48 * mb, gpu, 2) == 128);
  // The logits' [8192, 50304]: 197 blocks of 256 columns, 8 groups.
  CHECK(column_reduction_splits(8192, 50304, 800 * mb, gpu, 2) == 8);
  // f32: 128 columns a block.
  CHECK(column_reduction_splits(8192, 768, 24 * mb, gpu, 4) == 128);
  CHECK(column_reduction_splits(8192, 50304, 1600 * mb, gpu, 4) == 4);
  // Columns that 8 does not divide: as many as do (770 = 2 · 385: 2 a lane, 64 a block).
  CHECK(column_reduction_splits(8192, 770, 12 * mb, gpu, 2) == 128);
  CHECK(column_reduction_splits(8192, 2310, 36 * mb, gpu, 2) == 32);
}

TEST_CASE("split reductions: partial sums over row groups give the column sums, maxima and a "
          "16-bit sum, in the NVPTX emulator",
          "[emulated][split-reductions]") {
  for (DType t : {DType::f32, DType::bf16}) {
    Graph g;
    Value x = input(g, "x", {t, {4, 64, 40}});
    Value y = input(g, "y", {t, {4, 64, 40}});
    // Sums of squares: no cancellation, so a relative tolerance holds for 16-bit sums too.
    g.add_output("sum_xx", emit(OpId::reduce_sum, {x * x}, Attrs{.ints = {0, 1}}).id);
    g.add_output("sum_yy", emit(OpId::reduce_sum, {y * y}, Attrs{.ints = {0, 1}}).id);
    g.add_output("max", emit(OpId::reduce_max, {x}, Attrs{.ints = {0, 1}}).id);
    ColumnSplitOptions small{
        .target_blocks = 8, .min_rows = 64, .min_rows_per_split = 16, .min_bytes = 0};
    Graph split = split_column_reductions(g, small);
    CHECK(count_reductions(split) == 2 * count_reductions(g)); // 256 rows in 4 groups
    std::mt19937_64 rng(5);
    std::vector<F64Tensor> values;
    for (const NamedValue& in : g.inputs()) {
      F64Tensor v = random_operand(TestOperand{DType::f64, g.type(in.id).shape}, rng);
      round_all(v, t);
      values.push_back(v);
    }
    std::vector<F64Tensor> want = interpret(g, values);
    std::vector<HostTensor> got = emulate_nvptx_step(split, as_host(split, values));
    INFO(dtype_name(t));
    check_outputs_match(g, got, want, t == DType::f32 ? 1e-5 : backend_tolerance(t, false));
  }
}

TEST_CASE("split reductions: a layernorm backward's γ and β sums ride in its row kernel, a block "
          "per group of rows, and match the interpreter in the NVPTX emulator",
          "[emulated][split-reductions]") {
  // 2048 rows in 128 groups of 16 (the fewest groups the GPU fusion takes: a block an SM):
  // each block's 8 warps take 2 rows each. 160 columns are 40 groups of 4: lanes 0-7 take two
  // groups, the rest one.
  const int64_t width = 160;
  Graph dx = build_graph({{"x", {DType::f32, {4, 512, width}}, {}},
                          {"gamma", {DType::f32, {width}}, {}},
                          {"beta", {DType::f32, {width}}, {}},
                          {"r", {DType::f32, {4, 512, width}}, {}}},
                         [](Graph&, std::vector<Value>& in) {
                           return std::vector<Value>{sum(layernorm(in[0], in[1], in[2]) * in[3])};
                         });
  std::ostream quiet(nullptr);
  Graph optimized = Pipeline::standard(AutodiffOptions{{"x", "gamma", "beta"}, 0})
                        .run(dx, DumpSelection(""), quiet);
  ColumnSplitOptions groups{.row_groups = 128,
                            .row_groups_min = 128,
                            .row_group_min_rows = 8,
                            .row_group_max_length = 1024};
  Graph split = split_column_reductions(optimized, groups);
  CompileRun run("grouped", false, DumpSelection(""));
  Prepared prepared = prepare_for_nvptx(split, 90, run);
  const FusionPlan& plan = prepared.fusion;
  INFO(plan.print());
  std::size_t rows_with_partials = 0, column_passes = 0;
  for (const Kernel& k : plan.kernels) {
    if (k.kind == KernelKind::row && !row_layout(*plan.graph, k).partials.empty()) {
      ++rows_with_partials;
      RowLayout layout = row_layout(*plan.graph, k);
      CHECK(layout.partials.size() == 2); // γ and β
      CHECK(layout.group == 16);
      CHECK(gpu_launch(*plan.graph, k).blocks == 128);
    }
    // The column sums left are the short ones over the 128 groups: none reads [rows, width].
    if (k.kind == KernelKind::reduce && plan.graph->type(k.root).shape == Shape{width})
      for (ValueId r : k.reads)
        column_passes += numel(plan.graph->type(r).shape) == 2048 * width;
  }
  CHECK(rows_with_partials == 1);
  CHECK(column_passes == 0);
  // A split into a few long groups (no row_groups) would make a row kernel of a few blocks: its
  // partials stay a kernel of their own.
  ColumnSplitOptions few{
      .target_blocks = 8, .min_rows = 64, .min_rows_per_split = 16, .min_bytes = 0};
  CompileRun run_few("few groups", false, DumpSelection(""));
  Prepared few_groups = prepare_for_nvptx(split_column_reductions(optimized, few), 90, run_few);
  for (const Kernel& k : few_groups.fusion.kernels)
    CHECK((k.kind != KernelKind::row || row_layout(*few_groups.fusion.graph, k).partials.empty()));
  std::mt19937_64 rng(9);
  std::vector<F64Tensor> values;
  for (const NamedValue& in : optimized.inputs())
    values.push_back(random_operand(TestOperand{DType::f64, optimized.type(in.id).shape}, rng));
  std::vector<F64Tensor> want = interpret(optimized, values);
  std::vector<HostTensor> got = emulate_nvptx_step(split, as_host(split, values));
  check_outputs_match(optimized, got, want, backend_tolerance(DType::f32, true));
}

/// The cost model's time for every kernel of `plan` on an H100.
double predicted_seconds(const FusionPlan& plan) {
  cuda::DeviceInfo h100{.name = "H100",
                        .compute_capability = 90,
                        .multiprocessors = 132,
                        .clock_khz = 1980000,
                        .memory_clock_khz = 2619000,
                        .memory_bus_bits = 5120};
  std::vector<GpuLaunchStep> launches = model_launches(plan);
  std::vector<profile::KernelInfo> infos = describe_kernels(plan);
  predict_plan(plan, launches, infos, gpu_rates(h100));
  double total = 0;
  for (const profile::KernelInfo& k : infos)
    total += k.predicted_seconds;
  return total;
}

TEST_CASE("split reductions: a GPT-2 bias gradient on the GPU becomes a partial pass over 384 "
          "blocks of 8 bf16 columns a lane and a short one, predicted at least twice as fast",
          "[split-reductions]") {
  Graph g;
  Value dy = input(g, "dy", {DType::bf16, {8, 1024, 768}});
  g.add_output("db", emit(OpId::reduce_sum, {cast(dy, DType::f32)}, Attrs{.ints = {0, 1}}).id);
  std::ostream quiet(nullptr);
  Graph optimized = Pipeline::standard(std::nullopt).run(g, DumpSelection(""), quiet);
  CompileRun run("split", false, DumpSelection(""));
  Prepared prepared = prepare_for_nvptx(optimized, 90, run);
  const FusionPlan& plan = prepared.fusion;
  REQUIRE(plan.kernels.size() == 2);
  const Graph& pg = *plan.graph;
  // 128 groups of 64 rows; each block 256 threads, 32 lanes of 8 columns (16 bytes of bf16).
  CHECK(pg.type(plan.kernels[0].root).shape == Shape{128, 768});
  GpuLaunch partial = gpu_launch(pg, plan.kernels[0]);
  CHECK(partial.strategy == GpuStrategy::column_split);
  CHECK(partial.blocks == 384);
  CHECK(partial.threads == 256);
  CHECK(partial.vector_width == 8);
  CHECK(pg.type(plan.kernels[1].root).shape == Shape{768});
  double split = predicted_seconds(plan);
  EnvOverride off("SINTER_SPLIT_REDUCTIONS", "0");
  CompileRun run_off("one pass", false, DumpSelection(""));
  Prepared whole = prepare_for_nvptx(optimized, 90, run_off);
  REQUIRE(whole.fusion.kernels.size() == 1);
  double one_pass = predicted_seconds(whole.fusion);
  INFO("predicted " << one_pass * 1e6 << " us in one pass, " << split * 1e6 << " us split");
  CHECK(split * 2 < one_pass);
}

TEST_CASE("split reductions: a bias gradient a GEMM can write as its epilogue stays whole, for "
          "the GEMM to absorb",
          "[split-reductions]") {
  // GPT-2's MLP under mixed precision: db = Σ rows of dy (widened to f32), dW = xᵀ·dy.
  Graph g;
  Value dy = input(g, "dy", {DType::bf16, {8, 1024, 768}});
  Value x = input(g, "x", {DType::bf16, {8192, 3072}});
  g.add_output("db", emit(OpId::reduce_sum, {cast(dy, DType::f32)}, Attrs{.ints = {0, 1}}).id);
  g.add_output("dw", matmul(transpose(x), reshape(dy, {8192, 768})).id);
  std::vector<std::pair<DType, DType>> asked;
  ColumnSplitOptions options;
  options.gemm_sums_columns = [&](DType product, DType sum) {
    asked.emplace_back(product, sum);
    return true;
  };
  CHECK(count_reductions(split_column_reductions(g, options)) == 1);
  REQUIRE(asked.size() == 1);
  CHECK(asked[0] == std::make_pair(DType::bf16, DType::f32));
  // Where the GEMM cannot (cuBLASLt has no such epilogue), the reduction splits as before.
  options.gemm_sums_columns = [](DType, DType) { return false; };
  CHECK(count_reductions(split_column_reductions(g, options)) == 2);
  // A reduction of something no GEMM reads as its B splits without asking.
  Graph other;
  Value dz = input(other, "dz", {DType::bf16, {8, 1024, 768}});
  Value w = input(other, "w", {DType::bf16, {768, 64}});
  other.add_output("dz_sum",
                   emit(OpId::reduce_sum, {cast(dz, DType::f32)}, Attrs{.ints = {0, 1}}).id);
  other.add_output("y", matmul(reshape(dz, {8192, 768}), w).id); // dz as A, not B
  asked.clear();
  options.gemm_sums_columns = [&](DType product, DType sum) {
    asked.emplace_back(product, sum);
    return true;
  };
  CHECK(count_reductions(split_column_reductions(other, options)) == 2);
  CHECK(asked.empty());
}

TEST_CASE("column reductions: lanes of 16 bytes of neighbouring columns (8 bf16, 4 f32) give the "
          "interpreter's sums, sibling sums and maxima in the NVPTX emulator",
          "[emulated][split-reductions]") {
  struct Case {
    DType t;
    Shape shape;
    std::vector<int64_t> axes;
    int64_t width;
  };
  // Rows that 8 warps of 4 rows in flight do not divide; a last tile only partly of columns
  // (32776 = 128 · 256 + 8); a sum over the middle axis whose tiles straddle the output's rows.
  for (const Case& c :
       {Case{DType::bf16, {12, 32776}, {0}, 8}, Case{DType::f32, {9, 16388}, {0}, 4},
        Case{DType::bf16, {5, 9, 8000}, {1}, 8}}) {
    INFO(dtype_name(c.t) << " " << c.shape.size() << "-d");
    Graph g;
    Value x = input(g, "x", {c.t, c.shape});
    Value y = input(g, "y", {c.t, c.shape});
    g.add_output("sum_xx", emit(OpId::reduce_sum, {x * x}, Attrs{.ints = c.axes}).id);
    g.add_output("sum_yy", emit(OpId::reduce_sum, {y * y}, Attrs{.ints = c.axes}).id);
    g.add_output("max", emit(OpId::reduce_max, {x}, Attrs{.ints = c.axes}).id);
    CompileRun run("columns", false, DumpSelection(""));
    Prepared prepared = prepare_for_nvptx(g, 90, run);
    std::size_t vectorised = 0;
    for (const Kernel& k : prepared.fusion.kernels) {
      if (k.kind != KernelKind::reduce) continue;
      GpuLaunch launch = gpu_launch(*prepared.fusion.graph, k);
      CHECK(launch.strategy == GpuStrategy::column_split);
      CHECK(launch.threads == 256);
      vectorised += launch.vector_width == c.width;
    }
    CHECK(vectorised >= 1);
    std::mt19937_64 rng(11);
    std::vector<F64Tensor> values;
    for (const NamedValue& in : g.inputs()) {
      F64Tensor v = random_operand(TestOperand{DType::f64, g.type(in.id).shape}, rng);
      round_all(v, c.t);
      values.push_back(v);
    }
    std::vector<F64Tensor> want = interpret(g, values);
    std::vector<HostTensor> got = emulate_nvptx_step(g, as_host(g, values));
    check_outputs_match(g, got, want, c.t == DType::f32 ? 1e-5 : backend_tolerance(c.t, false));
  }
  // A mean over tokens of rows scaled by a statistic of each row (a layernorm's output pooled,
  // as a ViT's head reads it): the [.., 1] statistic does not narrow the lanes.
  Graph g;
  Value x = input(g, "x", {DType::f32, {64, 9, 512}});
  Value scale = input(g, "scale", {DType::f32, {64, 9, 1}});
  g.add_output("pooled", emit(OpId::reduce_sum, {x * scale}, Attrs{.ints = {1}}).id);
  FusionPlan plan = fuse(g);
  GpuLaunch launch = gpu_launch(g, plan.kernels.back());
  CHECK(launch.strategy == GpuStrategy::column_split);
  CHECK(launch.vector_width == 4);
  std::mt19937_64 rng(12);
  std::vector<F64Tensor> values;
  for (const NamedValue& in : g.inputs())
    values.push_back(random_operand(TestOperand{DType::f64, g.type(in.id).shape}, rng));
  check_outputs_match(g, emulate_nvptx_step(g, as_host(g, values)), interpret(g, values), 1e-5);
}

} // namespace
} // namespace sinter::testing
