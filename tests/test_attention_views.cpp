// tests/test_attention_views.cpp — attention reading q, k, v and dO where the heads lie (strided
// views of a packed projection) and writing o and the gradients where their readers want them:
// the views' strides, the rewrites, the CUDA plan without copies, and the emulated kernels
#include "jit/backend/attention_layout.hpp"
#include "jit/backend/cuda/attention_choice.hpp"
#include "jit/backend/cuda/gemm_epilogue.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/interp/interpreter.hpp"
#include "jit/passes/passes.hpp"
#include "jit/pipeline/pipeline.hpp"
#include "ops/attention_attrs.hpp"
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
/// by permute and reshape. loss = sum(merged · r). Without `bias`, b is an unused input. With
/// `by_width`, each head is sliced from the last dim of [B, T, 3·H·Dh] before the reshape to
/// [B, T, H, Dh] (the other way to write it), else from [B, T, 3, H, Dh].
Graph packed_attention(DType t, int64_t batch, int64_t tokens, int64_t heads, int64_t head_dim,
                       bool bias, bool by_width = false) {
  const int64_t width = heads * head_dim;
  return build_graph(
      {{"x", {t, {batch, tokens, width}}, {}},
       {"w", {t, {width, 3 * width}}, {}},
       {"b", {t, {3 * width}}, {}},
       {"r", {t, {batch, tokens, width}}, {}}},
      [&](Graph&, std::vector<Value>& in) {
        Value projected = bias ? matmul(in[0], in[1]) + in[2] : matmul(in[0], in[1]);
        Value packed = reshape(projected, {batch, tokens, 3, heads, head_dim});
        auto head = [&](int64_t i) {
          Value one =
              by_width
                  ? reshape(slice(projected, {0, 0, i * width}, {batch, tokens, (i + 1) * width}),
                            {batch, tokens, heads, head_dim})
                  : reshape(slice(packed, {0, 0, i, 0, 0}, {batch, tokens, i + 1, heads, head_dim}),
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

TEST_CASE("attention views: the forward writes o token-major where its heads are merged, one node "
          "writes the packed gradient of q, k and v, and the CPU's graph goes back to head-major",
          "[passes]") {
  std::ostream quiet(nullptr);
  auto count = [](const Graph& g, OpId op, bool (*layout)(const Attrs&)) {
    std::size_t n = 0;
    for (ValueId id = 0; id < g.size(); ++id)
      n += g.node(id).op == op && (!layout || layout(g.node(id).attrs));
    return n;
  };
  for (bool by_width : {false, true}) {
    INFO((by_width ? "heads sliced from [B, T, 3·H·Dh]" : "heads sliced from [B, T, 3, H, Dh]"));
    Graph step = Pipeline::standard(AutodiffOptions{{"x", "w", "b"}, 0})
                     .run(packed_attention(DType::f64, 2, 5, 2, 4, true, by_width),
                          DumpSelection(""), quiet);
    REQUIRE(count(step, OpId::fused_attention_grad, nullptr) == 3);
    Graph placed = attention_results_in_place(step);
    INFO(placed.print());
    CHECK(count(placed, OpId::fused_attention, attention_attrs::writes_token_major) == 1);
    CHECK(count(placed, OpId::fused_attention, nullptr) == 1);
    CHECK(count(placed, OpId::fused_attention_grad, attention_attrs::writes_packed) == 1);
    CHECK(count(placed, OpId::fused_attention_grad, nullptr) == 1);
    CHECK(count(placed, OpId::pad, nullptr) == 0); // the gradient's parts are placed, not padded
    Graph back = head_major_attention(placed);
    CHECK(count(back, OpId::fused_attention, attention_attrs::writes_token_major) == 0);
    CHECK(count(back, OpId::fused_attention_grad, attention_attrs::writes_packed) == 0);
    CHECK(count(back, OpId::fused_attention_grad, nullptr) == 3);
    // The same values, every output.
    std::mt19937_64 rng(11);
    std::vector<F64Tensor> values;
    for (const NamedValue& in : step.inputs())
      values.push_back(random_operand(TestOperand{DType::f64, step.type(in.id).shape}, rng));
    std::vector<F64Tensor> want = interpret(step, values);
    for (const Graph* g : {&placed, &back}) {
      std::vector<F64Tensor> got = interpret(*g, values);
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO(step.outputs()[i].name);
        CHECK(max_relative_difference(got[i], want[i]) < 1e-12);
      }
    }
  }
  // Nothing to place: o read as it is, and only q's gradient (k and v are not learned).
  Graph plain = build_graph({{"q", {DType::f64, {2, 2, 5, 4}}, {}},
                             {"k", {DType::f64, {2, 2, 5, 4}}, {}},
                             {"v", {DType::f64, {2, 2, 5, 4}}, {}},
                             {"r", {DType::f64, {2, 2, 5, 4}}, {}}},
                            [&](Graph&, std::vector<Value>& in) {
                              Value o = attention(in[0], in[1], in[2], {.causal = true});
                              return std::vector<Value>{sum(o * in[3])};
                            });
  Graph step = Pipeline::standard(AutodiffOptions{{"q"}, 0}).run(plain, DumpSelection(""), quiet);
  Graph placed = attention_results_in_place(step);
  CHECK(count(placed, OpId::fused_attention, attention_attrs::writes_token_major) == 0);
  CHECK(count(placed, OpId::fused_attention_grad, attention_attrs::writes_packed) == 0);
  CHECK(count(placed, OpId::fused_attention_grad, nullptr) ==
        count(step, OpId::fused_attention_grad, nullptr));
}

TEST_CASE("attention views: on CUDA, q, k, v and dO are read from the packed projection and its "
          "gradient, the bias joins the GEMM, and the emulated kernels match the interpreter",
          "[attention][emulated]") {
  // 70 tokens: a last query block and key tile past the end. Rows of the packed projection are
  // 3 · 32 elements apart, heads 16 apart.
  const int64_t batch = 2, tokens = 70, heads = 2, head_dim = 16;
  std::ostream quiet(nullptr);
  auto optimized = [&](DType t, bool bias, bool by_width = false) {
    std::vector<std::string> wrt{"x", "w"};
    if (bias) wrt.push_back("b");
    return Pipeline::standard(AutodiffOptions{wrt, 0})
        .run(packed_attention(t, batch, tokens, heads, head_dim, bias, by_width), DumpSelection(""),
             quiet);
  };
  {
    Graph step = optimized(DType::bf16, true);
    CompileRun run("views", false, DumpSelection(""));
    Prepared prepared = prepare_for_nvptx(step, 90, run);
    const FusionPlan& plan = prepared.fusion;
    const Graph& g = *plan.graph;
    INFO(plan.print());
    std::size_t attention_kernels = 0;
    const int64_t width = heads * head_dim;
    for (const Kernel& kernel : plan.kernels) {
      if (kernel.kind == KernelKind::loop) { // no copy lays out heads, nor merges them
        CHECK(g.type(kernel.root).shape != Shape{batch, heads, tokens, head_dim});
        for (ValueId v : kernel.body)
          CHECK((g.node(v).op != OpId::permute && g.node(v).op != OpId::pad));
      }
      if (kernel.kind != KernelKind::attention) continue;
      ++attention_kernels;
      AttentionLayout layout = attention_layout(plan, kernel);
      std::vector<std::size_t> strided{0, 1, 2};
      // o, written token-major by the forward, and dO, from the merged heads' gradient.
      if (layout.backward) strided.insert(strided.end(), {3, 5});
      for (std::size_t operand : strided) {
        INFO("operand " << operand);
        const AttentionOperand& o = layout.operands[operand];
        CHECK_FALSE(o.contiguous);
        CHECK(o.row_stride == (operand < 3 ? 3 : 1) * width);
        CHECK(o.batch_stride ==
              std::vector<int64_t>{tokens * o.row_stride, head_dim}); // [B, H] over [B, T, H·Dh]
        CHECK(o.offset == (operand < 3 ? static_cast<int64_t>(operand) * width : 0));
      }
      // The forward writes o token-major, [B, T, H, Dh], the output projection's operand; the
      // backward writes dq, dk and dv into one [B, T, 3, H, Dh], the projection's gradient.
      std::vector<const AttentionOperand*> results{&layout.o_result};
      if (layout.backward) results = {&layout.dq_result, &layout.dk_result, &layout.dv_result};
      for (std::size_t part = 0; part < results.size(); ++part) {
        INFO("result " << part);
        const AttentionOperand& r = *results[part];
        CHECK(r.buffer == results[0]->buffer);
        CHECK_FALSE(r.contiguous);
        CHECK(r.row_stride == (layout.backward ? 3 : 1) * width);
        CHECK(r.batch_stride == std::vector<int64_t>{tokens * r.row_stride, head_dim});
        CHECK(r.offset == static_cast<int64_t>(part) * width);
      }
      // cuDNN's tensors carry the same strides, and its outputs the same places.
      auto form = cudnn_attention_step(plan, kernel, 90);
      REQUIRE(std::holds_alternative<CudnnAttentionStep>(form));
      const CudnnAttentionStep& step = std::get<CudnnAttentionStep>(form);
      using Strides = kernels::CudnnAttentionShape::Strides;
      CHECK(step.shape.o_strides == Strides{tokens * width, head_dim, width});
      if (!layout.backward) continue;
      for (auto role : {CudnnAttentionStep::dq, CudnnAttentionStep::dk, CudnnAttentionStep::dv}) {
        CHECK(step.nodes[role] == layout.dq_result.buffer);
        CHECK(step.offsets[role] == (role - CudnnAttentionStep::dq) * width);
      }
      CHECK(step.shape.dq_strides == Strides{tokens * 3 * width, head_dim, 3 * width});
      CHECK(step.shape.dv_strides == step.shape.dq_strides);
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
  for (auto [t, by_width] : {std::pair{DType::bf16, false}, std::pair{DType::f16, false},
                             std::pair{DType::bf16, true}}) {
    INFO(dtype_name(t) << (by_width ? ", heads sliced from [B, T, 3·H·Dh]" : ""));
    Graph step = optimized(t, true, by_width);
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
