// tests/test_attention_views.cpp — attention reading q, k, v and dO where the heads lie (strided
// views of a packed projection): the views' strides, the CUDA plan without copies, and the
// emulated kernels against the interpreter
#include "jit/backend/attention_layout.hpp"
#include "jit/backend/cuda/gemm_epilogue.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/passes/passes.hpp"
#include "jit/pipeline/pipeline.hpp"
#include "tests/support/nvptx_emulator.hpp"

#include "backend_check.hpp"
#include "env_override.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

namespace sinter::testing {
namespace {

/// Causal self-attention as the DSL's MultiHeadAttention writes it: one projection to
/// [B, T, 3·H·Dh], split into q, k and v by reshape, slice and permute; the heads merged back
/// by permute and reshape. loss = sum(merged · r). Without `bias`, b is an unused input.
Graph packed_attention(DType t, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim,
                       bool bias) {
  const int64_t width = heads * head_dim;
  return build_graph({{"x", {t, {batch, tokens, width}}, {}},
                      {"w", {t, {width, 3 * width}}, {}},
                      {"b", {t, {3 * width}}, {}},
                      {"r", {t, {batch, tokens, width}}, {}}},
                     [&](Graph&, std::vector<Value>& in) {
                       Value projected = bias ? matmul(in[0], in[1]) + in[2] : matmul(in[0], in[1]);
                       Value packed = reshape(projected, {batch, tokens, 3, heads, head_dim});
                       auto head = [&](int64_t i) {
                         Value one = reshape(slice(packed, {0, 0, i, 0, 0},
                                                   {batch, tokens, i + 1, heads, head_dim}),
                                             {batch, tokens, heads, head_dim});
                         return permute(one, {0, 2, 1, 3});
                       };
                       Value o = attention(head(0), head(1), head(2), {.causal = true});
                       Value merged = reshape(permute(o, {0, 2, 1, 3}), {batch, tokens, width});
                       return std::vector<Value>{sum(merged * in[3])};
                     });
}

} // namespace

TEST_CASE("attention views: reshapes, slices and permutes of a buffer as an offset and strides",
          "[passes]") {
  // k of a packed [2, 6, 3·2·8] projection: [2, 6, 3, 2, 8], slice 1 of dim 2, heads first.
  Graph g;
  Value x = input(g, "x", {DType::bf16, {2, 6, 48}});
  Value k = permute(
      reshape(slice(reshape(x, {2, 6, 3, 2, 8}), {0, 0, 1, 0, 0}, {2, 6, 2, 2, 8}), {2, 6, 2, 8}),
      {0, 2, 1, 3});
  auto is_input = [&](ValueId id) { return id == x.id; };
  std::optional<StridedView> view = strided_view(g, k.id, is_input);
  REQUIRE(view);
  CHECK(view->buffer == x.id);
  CHECK(view->offset == 16); // slice 1 of 3 blocks of 2 × 8
  CHECK(view->strides == std::vector<int64_t>{288, 8, 48, 1});
  // Heads of 8 bf16 elements are whole 16-byte pieces: attention may read them in place.
  CHECK(attention_operand_view(g, k.id, is_input));
  // A transpose flattened into one dim interleaves the rows: no strides express it.
  Value flat = reshape(permute(reshape(x, {12, 48}), {1, 0}), {576});
  CHECK_FALSE(strided_view(g, flat.id, is_input));
  // Heads of 4 elements start at 8-byte boundaries: a copy is laid out instead.
  Value narrow = permute(reshape(x, {2, 6, 12, 4}), {0, 2, 1, 3});
  REQUIRE(strided_view(g, narrow.id, is_input));
  CHECK_FALSE(attention_operand_view(g, narrow.id, is_input));
  // A transposed head (its features not contiguous) is copied too.
  Value transposed = permute(reshape(x, {2, 6, 6, 8}), {0, 2, 3, 1});
  CHECK_FALSE(attention_operand_view(g, transposed.id, is_input));
}

TEST_CASE("attention views: on CUDA, q, k, v and dO are read from the packed projection and its "
          "gradient, the bias joins the GEMM, and the emulated kernels match the interpreter",
          "[attention][emulated]") {
  // 70 tokens: a last query block and key tile past the end. Rows of the packed projection are
  // 3 · 32 elements apart, heads 16 apart.
  const int64_t batch = 2, tokens = 70, heads = 2, head_dim = 16;
  std::ostream quiet(nullptr);
  auto optimized = [&](DType t, bool bias) {
    std::vector<std::string> wrt{"x", "w"};
    if (bias) wrt.push_back("b");
    return Pipeline::standard(AutodiffOptions{wrt, 0})
        .run(packed_attention(t, batch, tokens, heads, head_dim, bias), DumpSelection(""), quiet);
  };
  {
    Graph step = optimized(DType::bf16, true);
    CompileRun run("views", false, DumpSelection(""));
    Prepared prepared = prepare_for_nvptx(step, 90, run);
    const FusionPlan& plan = prepared.fusion;
    const Graph& g = *plan.graph;
    INFO(plan.print());
    std::size_t attention_kernels = 0;
    for (const Kernel& kernel : plan.kernels) {
      if (kernel.kind == KernelKind::loop) // no copy lays out a head [B, H, T, Dh]
        CHECK(g.type(kernel.root).shape != Shape{batch, heads, tokens, head_dim});
      if (kernel.kind != KernelKind::attention) continue;
      ++attention_kernels;
      AttentionLayout layout = attention_layout(plan, kernel);
      std::vector<std::size_t> strided{0, 1, 2};
      if (layout.backward) strided.push_back(5); // dO, from the merged heads' gradient
      for (std::size_t operand : strided) {
        INFO("operand " << operand);
        const AttentionOperand& o = layout.operands[operand];
        CHECK_FALSE(o.contiguous);
        CHECK(o.row_stride == (operand == 5 ? 1 : 3) * heads * head_dim);
        CHECK(o.batch_stride ==
              std::vector<int64_t>{tokens * o.row_stride, head_dim}); // [B, H] over [B, T, H·Dh]
        CHECK(o.offset == (operand < 3 ? static_cast<int64_t>(operand) * heads * head_dim : 0));
      }
    }
    CHECK(attention_kernels == 2);
    // The projection's bias: what is left of the copy that split out the heads, cuBLASLt's
    // epilogue now.
    bool bias_epilogue = false;
    for (const GemmEpilogue& e : find_gemm_epilogues(plan, prepared.memory))
      bias_epilogue |=
          e.kind == EpilogueKind::bias &&
          g.type(plan.kernels[e.absorbed].root).shape == Shape{batch, tokens, 3 * heads * head_dim};
    CHECK(bias_epilogue);
  }
  // The same numbers as the copies give, to the bit: the kernels read the same values, from
  // elsewhere (the copies' path is checked against the interpreter by the other attention
  // tests). Causal, bias and all, in bf16 and f16.
  for (DType t : {DType::bf16, DType::f16}) {
    INFO(dtype_name(t));
    Graph step = optimized(t, true);
    std::mt19937_64 rng(5);
    std::vector<F64Tensor> values;
    for (const NamedValue& in : step.inputs())
      values.push_back(random_operand(TestOperand{DType::f64, step.type(in.id).shape}, rng));
    std::vector<HostTensor> inputs = as_host(step, values);
    std::vector<HostTensor> viewed = emulate_nvptx_step(step, inputs);
    EnvOverride copies("SINTER_ATTENTION_VIEWS", "0");
    std::vector<HostTensor> copied = emulate_nvptx_step(step, inputs);
    REQUIRE(viewed.size() == step.outputs().size());
    REQUIRE(copied.size() == viewed.size());
    for (std::size_t i = 0; i < viewed.size(); ++i) {
      INFO(step.outputs()[i].name);
      std::vector<double> a = viewed[i].to_doubles(), b = copied[i].to_doubles();
      CHECK(std::all_of(a.begin(), a.end(), [](double x) { return std::isfinite(x); }));
      CHECK(a == b);
    }
  }
  // And with the copies, the plan has them back: one loop a layer lays out q, k and v.
  EnvOverride copies("SINTER_ATTENTION_VIEWS", "0");
  CompileRun run("copies", false, DumpSelection(""));
  Prepared prepared = prepare_for_nvptx(optimized(DType::bf16, true), 90, run);
  std::size_t head_copies = 0;
  for (const Kernel& kernel : prepared.fusion.kernels)
    head_copies +=
        kernel.kind == KernelKind::loop &&
        prepared.fusion.graph->type(kernel.root).shape == Shape{batch, heads, tokens, head_dim};
  CHECK(head_copies >= 2); // q, k, v (one kernel) and dO
}

} // namespace sinter::testing
