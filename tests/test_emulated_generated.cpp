// tests/test_emulated_generated.cpp — the CUDA backend's generated kernels run in the NVPTX
// emulator against the interpreter: every registered op (forward and gradients), a transformer
// layer's gradients, and the GPU plan's kernel counts (row kernels, sibling reductions)
#include "dsl/sinter.hpp"

#include "backend_check.hpp"
#include "env_override.hpp"
#include "op_test_registry.hpp"
#include "ptx_check.hpp"

#include "jit/backend/cuda/gemm_epilogue.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "tests/support/nvptx_emulator.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <string>

namespace sinter::testing {
namespace {

void compare_emulated(const Graph& optimized, const std::vector<F64Tensor>& values,
                      double tolerance, bool keeps_operands = false) {
  std::vector<F64Tensor> want = interpret(optimized, values);
  std::vector<HostTensor> got =
      emulate_nvptx_step(optimized, as_host(optimized, values), 80, keeps_operands);
  check_outputs_match(optimized, got, want, tolerance);
}

void forward_emulated(OpId op) {
  for_each_forward_case(op, [](const Graph& g, const std::vector<F64Tensor>& values, DType t) {
    compare_emulated(g, values, t == DType::f64 ? 1e-11 : backend_tolerance(t, false));
  });
}

void gradient_emulated(OpId op) {
  for_each_gradient_case(op, [](const Graph& g, const std::vector<F64Tensor>& values, DType t) {
    compare_emulated(g, values, t == DType::f64 ? 1e-9 : backend_tolerance(t, true));
  });
}

const bool forward_registered = register_op_tests<forward_emulated>(
    "CUDA kernels, emulated, match the interpreter (f64, f32, bf16, f16)",
    "[emulated][emulated-forward]");
const bool gradient_registered =
    register_op_tests<gradient_emulated>("CUDA gradient kernels, emulated, match the interpreter",
                                         "[emulated][emulated-gradient]", differentiable_op);

/// The GPU's plan for an optimised graph (what GpuExecutable fuses on an sm_90 device).
struct GpuPlan {
  CompileRun run{"gpu plan", false, DumpSelection("")};
  Prepared prepared;
  const Graph& graph;
  const FusionPlan& plan;
  /// `keeps_operands`: as on a device where the plan that keeps the backward's GEMM operands
  /// fits (no `rematerialize`); otherwise they are recomputed, as where no device says.
  explicit GpuPlan(const Graph& optimized, bool keeps_operands = false)
      : prepared(keeps_operands
                     ? prepare(optimized,
                               nvptx_graph_stages(optimized, 90, nullptr, {},
                                                  [](const FusionPlan&) { return true; }),
                               run)
                     : prepare_for_nvptx(optimized, 90, run)),
        graph(*prepared.graph), plan(prepared.fusion) {}
  std::size_t count(KernelKind kind) const {
    return static_cast<std::size_t>(std::count_if(plan.kernels.begin(), plan.kernels.end(),
                                                  [&](const Kernel& k) { return k.kind == kind; }));
  }
};

/// loss = cross_entropy(LN(x + W2·gelu(W1·LN(x) + b1) + b2) · Wo, labels), differentiated with
/// respect to every weight and x: layernorm rows forward and backward, a softmax-loss row, bias
/// and γ/β column sums, GEMMs.
/// With `amp`, the f32 layer goes through the autocast pass to bf16 first, as a step's forward
/// does: GEMMs low, the residual stream f32.
Graph transformer_layer_gradients(DType t, int64_t rows, int64_t width, int64_t classes,
                                  bool amp = false) {
  Graph g;
  Value x = input(g, "x", {t, {rows, width}});
  Value g1 = input(g, "g1", {t, {width}});
  Value c1 = input(g, "c1", {t, {width}});
  Value w1 = input(g, "w1", {t, {width, 2 * width}});
  Value b1 = input(g, "b1", {t, {2 * width}});
  Value w2 = input(g, "w2", {t, {2 * width, width}});
  Value b2 = input(g, "b2", {t, {width}});
  Value g2 = input(g, "g2", {t, {width}});
  Value c2 = input(g, "c2", {t, {width}});
  Value wo = input(g, "wo", {t, {width, classes}});
  Value labels = input(g, "labels", {DType::i32, {rows}});
  // Under AMP the residual stream is f32 work (in a model, the embeddings' sum), not an input.
  if (amp) x = x * constant(g, 1.0, t);
  Value h = x + matmul(gelu_tanh(matmul(layernorm(x, g1, c1), w1) + b1), w2) + b2;
  g.add_output("loss", cross_entropy_mean(matmul(layernorm(h, g2, c2), wo), labels).id);
  if (amp) g = autocast(g, DType::bf16);
  return Pipeline::standard(
             AutodiffOptions{{"x", "g1", "c1", "w1", "b1", "w2", "b2", "g2", "c2", "wo"}, 0})
      .run(g, DumpSelection(""), std::cerr);
}

std::vector<F64Tensor> layer_values(const Graph& g, int64_t classes) {
  std::mt19937_64 rng(21);
  std::vector<F64Tensor> values;
  for (const NamedValue& in : g.inputs()) {
    TensorType t = g.type(in.id);
    TestOperand spec{DType::f64, t.shape};
    if (in.name == "labels")
      spec = TestOperand{DType::i32, t.shape, 0, static_cast<double>(classes)};
    values.push_back(random_operand(spec, rng));
    if (is_float(t.dtype)) round_all(values.back(), t.dtype);
  }
  return values;
}

} // namespace

TEST_CASE("emulated CUDA: a transformer layer's gradients match the interpreter (GEMMs, row "
          "kernels, sibling reductions)",
          "[emulated]") {
  for (DType t : {DType::f32, DType::bf16}) {
    INFO(dtype_name(t));
    // 90 rows: the bias, γ and β sums (over rows) take the column-split schedule (no groups
    // of 8 rows divide them for the row kernels' partials).
    Graph g = transformer_layer_gradients(t, 90, 48, 10);
    GpuPlan gpu(g);
    INFO(gpu.plan.print());
    CHECK(gpu.count(KernelKind::row) >= 4); // two layernorms, forward and backward
    std::size_t sibling_column_passes = 0;
    for (const Kernel& k : gpu.plan.kernels)
      sibling_column_passes += k.kind == KernelKind::reduce && !k.extra_outputs.empty() &&
                               gpu_launch(gpu.graph, k).strategy == GpuStrategy::column_split;
    CHECK(sibling_column_passes >= 2); // the γ and β sums of each layernorm
    compare_emulated(g, layer_values(g, 10), backend_tolerance(t, true));
    // And with the GEMM operands kept (a device where they fit): GELU's backward then writes
    // its gradient as its root.
    compare_emulated(g, layer_values(g, 10), backend_tolerance(t, true), true);
  }
}

TEST_CASE("emulated CUDA: under bf16 autocast a layer's row kernels also write the casts its "
          "GEMMs read, and its gradients match the interpreter",
          "[emulated]") {
  Graph g = transformer_layer_gradients(DType::f32, 96, 48, 10, true);
  GpuPlan gpu(g);
  INFO(gpu.plan.print());
  // The residual stream's gradient is f32; the GEMMs before it read its bf16 cast, which the
  // layernorm-backward row kernel writes as another output.
  std::size_t rows_writing_casts = 0;
  for (const Kernel& k : gpu.plan.kernels) {
    if (k.kind != KernelKind::row) continue;
    for (ValueId out : k.outputs()) {
      ValueId v = out;
      while (gpu.graph.node(v).op == OpId::reshape)
        v = gpu.graph.node(v).inputs[0];
      // A bf16 output that casts another of the kernel's own (f32) outputs.
      rows_writing_casts += gpu.graph.type(out).dtype == DType::bf16 &&
                            gpu.graph.node(v).op == OpId::cast &&
                            k.writes(gpu.graph.node(v).inputs[0]);
    }
  }
  CHECK(rows_writing_casts >= 1);
  compare_emulated(g, layer_values(g, 10), backend_tolerance(DType::bf16, true));
}

TEST_CASE("GPU plan: the loss's row kernel also writes the logits' gradient, over the logits, "
          "and the gradients still match",
          "[emulated][fusion][memory]") {
  // A language model's head and loss over [batch, tokens] (the loss's mean over both is its
  // own reduction, as in GPT-2's step), 64 classes.
  constexpr int64_t batch = 16, tokens = 8, rows = batch * tokens, width = 16, classes = 64;
  for (DType t : {DType::bf16, DType::f32}) {
    INFO(dtype_name(t));
    Graph g;
    Value x = input(g, "x", {t, {batch, tokens, width}});
    Value w = input(g, "w", {t, {width, classes}});
    Value labels = input(g, "labels", {DType::i32, {batch, tokens}});
    g.add_output("loss", cross_entropy_mean(matmul(x, w), labels).id);
    g = Pipeline::standard(AutodiffOptions{{"x", "w"}, 0}).run(g, DumpSelection(""), std::cerr);
    GpuPlan gpu(g);
    INFO(gpu.plan.print());
    // The log-sum-exp's row kernel writes the gradient of the logits (read in one pass over
    // them instead of two) into the logits' own buffer, which dies there: no second buffer of
    // logits at the loss, where a language model's memory peaks.
    const Kernel* loss = nullptr;
    for (const Kernel& k : gpu.plan.kernels)
      if (k.kind == KernelKind::row && k.in_place() &&
          numel(gpu.graph.type(k.root).shape) == rows * classes)
        loss = &k;
    REQUIRE(loss);
    CHECK(numel(gpu.graph.type(loss->overwrites).shape) == rows * classes);
    std::size_t loops_over_logits = 0;
    for (const Kernel& k : gpu.plan.kernels)
      loops_over_logits +=
          k.kind == KernelKind::loop && numel(gpu.graph.type(k.root).shape) == rows * classes;
    CHECK(loops_over_logits == 0);
    // The row is read once for the max and the picked logit together, once for the sum of
    // exponentials (it reads the max), and once more to write the gradient.
    RowLayout layout = row_layout(gpu.graph, *loss);
    CHECK(layout.reductions.size() == 3);
    REQUIRE(layout.passes.size() == 2);
    CHECK(layout.passes[0].size() == 2);
    // Each thread computes its 16 bytes of the row before it stores them, so the pass that
    // reads the logits and writes their gradient over them still moves 16 bytes an access.
    std::string ptx = nvptx_target(90).compile(gpu.plan, *loss, "loss");
    INFO(ptx);
    CHECK(ptx.find(t == DType::f32 ? "ld.global.v4.f32" : "ld.global.v4.b32") != std::string::npos);
    CHECK(ptx.find("st.global.v4") != std::string::npos);
    compare_emulated(g, layer_values(g, classes), backend_tolerance(t, true));
  }
}

TEST_CASE("GPU plan: a language model head's bias rides on its GEMM as the epilogue, so the "
          "loss's row kernel (a block a row) reads no vector, and the gradients still match",
          "[emulated][fusion]") {
  // Rows of 4096 logits take a block each (longer than gpu_warp_row_limit); of 64, a warp.
  // SINTER_HEAD_BIAS_EPILOGUE=0 leaves the bias to the row kernel (an A/B on a GPU).
  constexpr int64_t batch = 4, tokens = 4, width = 16;
  for (auto [classes, setting] :
       {std::pair<int64_t, const char*>{4096, nullptr}, {64, nullptr}, {4096, "0"}}) {
    INFO(classes << " classes, SINTER_HEAD_BIAS_EPILOGUE=" << (setting ? setting : "unset"));
    EnvOverride epilogue("SINTER_HEAD_BIAS_EPILOGUE",
                         setting ? std::optional<std::string>(setting) : std::nullopt);
    Graph g = lm_head_gradients(batch, tokens, width, classes);
    GpuPlan gpu(g);
    INFO(gpu.plan.print());
    std::size_t head_biases = 0;
    for (const GemmEpilogue& e : find_gemm_epilogues(gpu.plan, gpu.prepared.memory))
      head_biases += e.kind == EpilogueKind::bias && gpu.graph.type(e.bias).shape == Shape{classes};
    // A row kernel that inlined the bias would read all of it again for every row and pass.
    std::size_t rows_reading_the_bias = 0;
    for (const Kernel& k : gpu.plan.kernels)
      if (k.kind == KernelKind::row)
        for (ValueId r : k.reads)
          rows_reading_the_bias += gpu.graph.type(r).shape == Shape{classes};
    if (classes > gpu_warp_row_limit && !setting) {
      CHECK(head_biases == 1);
      CHECK(rows_reading_the_bias == 0);
    } else { // the bias stays in the loss's row kernel, no kernel of its own
      CHECK(head_biases == 0);
      CHECK(rows_reading_the_bias == 1);
    }
    compare_emulated(g, layer_values(g, classes), backend_tolerance(DType::bf16, true));
  }
}

TEST_CASE("GPU plan: GELU and layer-norm values the backward pass reads are recomputed, not "
          "stored, and the gradients still match",
          "[emulated][fusion][memory]") {
  Graph g = transformer_layer_gradients(DType::bf16, 96, 48, 10);
  FusionOptions storing = gpu_fusion_options;
  storing.rematerialize = false;
  FusionPlan stored = fuse(g, storing);
  GpuPlan gpu(g);
  INFO(gpu.plan.print());
  auto stores = [](const FusionPlan& plan, auto&& pick) {
    std::size_t count = 0;
    for (const Kernel& k : plan.kernels)
      for (ValueId out : k.outputs())
        count += pick(*plan.graph, out);
    return count;
  };
  auto tanh_value = [](const Graph& graph, ValueId v) { return graph.node(v).op == OpId::tanh; };
  // The layer norms' centred inputs (x - mean, [rows, width]).
  auto centred = [](const Graph& graph, ValueId v) {
    return graph.node(v).op == OpId::sub && graph.type(v).shape == Shape{96, 48};
  };
  CHECK(stores(stored, tanh_value) == 1);
  CHECK(stores(gpu.plan, tanh_value) == 0);
  // The first one's input is the layer's input, alive anyway; the second one's is a sum whose
  // GEMM operand would have to live as long, as many bytes in bf16: that one stays.
  CHECK(stores(stored, centred) == 2);
  CHECK(stores(gpu.plan, centred) == 1);
  // GELU's output is computed again for its weight gradient's GEMM.
  std::size_t tanh_nodes = 0;
  for (ValueId v = 0; v < gpu.graph.size(); ++v)
    tanh_nodes += gpu.graph.node(v).op == OpId::tanh;
  CHECK(tanh_nodes > 1);
  // ... in the backward pass: after the loss, not merged back into the forward's kernel.
  REQUIRE(gpu.graph.outputs()[0].name == "loss");
  auto kernel_writing = [&](auto&& pick) {
    for (std::size_t k = 0; k < gpu.plan.kernels.size(); ++k)
      for (ValueId out : gpu.plan.kernels[k].outputs())
        if (pick(out)) return k;
    return gpu.plan.kernels.size();
  };
  std::size_t loss_kernel =
      kernel_writing([&](ValueId v) { return v == gpu.graph.outputs()[0].id; });
  std::size_t first_recomputing =
      kernel_writing([&](ValueId v) { return gpu.graph.recomputed(v); });
  CHECK(loss_kernel < first_recomputing);
  CHECK(first_recomputing < gpu.plan.kernels.size());
  CHECK(MemoryPlan(gpu.plan).arena_bytes() < MemoryPlan(stored).arena_bytes());
  compare_emulated(g, layer_values(g, 10), backend_tolerance(DType::bf16, true));
}

TEST_CASE("emulated CUDA: rows longer than a warp takes run a block per row (layernorm and "
          "softmax, forward and backward), read from memory once where they pass over the row "
          "again",
          "[emulated]") {
  for (int64_t width : {int64_t{40}, int64_t{3000}}) {
    INFO("width " << width);
    Graph g = build_graph({{"x", {DType::f32, {5, width}}, {}},
                           {"gamma", {DType::f32, {width}}, {}},
                           {"beta", {DType::f32, {width}}, {}},
                           {"r", {DType::f32, {5, width}}, {}}},
                          [](Graph&, std::vector<Value>& in) {
                            Value y = softmax(layernorm(in[0], in[1], in[2]) * 3.0, -1);
                            return std::vector<Value>{sum(y * in[3])};
                          });
    Graph step = Pipeline::standard(AutodiffOptions{{"x", "gamma", "beta"}, 0})
                     .run(g, DumpSelection(""), std::cerr);
    GpuPlan gpu(step);
    INFO(gpu.plan.print());
    std::size_t rows = 0, block_rows = 0, cached = 0;
    for (const Kernel& k : gpu.plan.kernels)
      if (k.kind == KernelKind::row) {
        ++rows;
        GpuLaunch launch = gpu_launch(gpu.graph, k);
        block_rows += launch.strategy == GpuStrategy::block_per_output;
        CHECK(launch.vector_width == (width % 4 == 0 ? 4 : 1));
        // The row cache: the first pass keeps the rows it reads (f32: 12000 bytes a buffer)
        // in shared memory for the later passes.
        cached += launch.shared_bytes > 0;
        CHECK(launch.shared_bytes % (width * 4) == 0);
      }
    CHECK(rows >= 2);
    CHECK(block_rows == (width > gpu_warp_row_limit ? rows : 0));
    CHECK((cached >= 2) == (width > gpu_warp_row_limit));
    std::mt19937_64 rng(5);
    std::vector<F64Tensor> values;
    for (const NamedValue& in : step.inputs())
      values.push_back(random_operand({DType::f64, step.type(in.id).shape}, rng));
    compare_emulated(step, values, backend_tolerance(DType::f32, true));
  }
}

TEST_CASE("emulated CUDA: merged updates of small vectors take one element a thread, the "
          "others 16 bytes, and both match the interpreter",
          "[emulated]") {
  // u_k = p_k - lr · g_k and its bf16 copy for n [768] parameters: one merged pass on the GPU.
  auto updates = [](int n) {
    Graph g;
    Value lr = input(g, "lr", {DType::f32, {}});
    for (int k = 0; k < n; ++k) {
      Value p = input(g, "p" + std::to_string(k), {DType::f32, {768}});
      Value grad = input(g, "g" + std::to_string(k), {DType::f32, {768}});
      Value u = p - broadcast_to(lr, {768}) * grad;
      g.add_output("u" + std::to_string(k), u.id);
      g.add_output("c" + std::to_string(k), cast(u, DType::bf16).id);
    }
    return Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr);
  };
  for (int n : {2, 6}) {
    INFO(n << " parameters");
    Graph step = updates(n);
    GpuPlan gpu(step);
    INFO(gpu.plan.print());
    REQUIRE(gpu.count(KernelKind::loop) == 1);
    const Kernel& merged = gpu.plan.kernels.front();
    REQUIRE(merged.outputs().size() == static_cast<std::size_t>(2 * n));
    GpuLaunch launch = gpu_launch(gpu.graph, merged);
    bool narrow = merged.outputs().size() > gpu_narrow_loop_outputs;
    CHECK(launch.vector_width == (narrow ? 1 : 4));
    CHECK(launch.blocks == (narrow ? 3 : 1));
    std::mt19937_64 rng(11);
    std::vector<F64Tensor> values;
    for (const NamedValue& in : step.inputs())
      values.push_back(random_operand({DType::f64, step.type(in.id).shape}, rng));
    compare_emulated(step, values, backend_tolerance(DType::bf16, false));
  }
}

TEST_CASE("emulated CUDA: updates are stored over the inputs they replace, unless a later "
          "kernel still reads the input, and match the interpreter",
          "[emulated][fusion]") {
  // p_k ← p_k − lr · g_k and its bf16 copy c_k, each donated to the input it replaces (as a
  // step's parameters and working copies are): n = 2 runs 16 bytes a thread, n = 6 one element.
  // q ← 2q is donated too, but a reduction after it still reads q.
  auto updates = [](int n) {
    Graph g;
    Value lr = input(g, "lr", {DType::f32, {}});
    for (int k = 0; k < n; ++k) {
      std::string name = std::to_string(k);
      Value p = input(g, "p" + name, {DType::f32, {768}});
      input(g, "c" + name, {DType::bf16, {768}});
      Value grad = input(g, "g" + name, {DType::f32, {768}});
      Value u = p - broadcast_to(lr, {768}) * grad;
      g.add_output("new.p" + name, u.id);
      g.add_output("new.c" + name, cast(u, DType::bf16).id);
      g.donate(static_cast<std::size_t>(1 + 3 * k), static_cast<std::size_t>(2 * k));
      g.donate(static_cast<std::size_t>(2 + 3 * k), static_cast<std::size_t>(2 * k + 1));
    }
    Value q = input(g, "q", {DType::f32, {768}});
    g.add_output("new.q", (q * 2.0).id);
    g.add_output("q.norm", sum(q * q, {0}).id);
    g.donate(g.inputs().size() - 1, g.outputs().size() - 2);
    return Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr);
  };
  for (int n : {2, 6}) {
    INFO(n << " parameters");
    Graph step = updates(n);
    REQUIRE(step.donations().size() == static_cast<std::size_t>(2 * n + 1));
    GpuPlan gpu(step);
    INFO(gpu.plan.print());
    std::vector<std::pair<ValueId, ValueId>> stored;
    for (const Kernel& k : gpu.plan.kernels)
      stored.insert(stored.end(), k.over_inputs.begin(), k.over_inputs.end());
    CHECK(stored.size() == static_cast<std::size_t>(2 * n));
    const ValueId q = gpu.graph.inputs().back().id;
    CHECK(std::none_of(stored.begin(), stored.end(), [&](auto pair) { return pair.second == q; }));
    std::mt19937_64 rng(11);
    std::vector<F64Tensor> values;
    for (const NamedValue& in : step.inputs()) {
      values.push_back(random_operand({DType::f64, step.type(in.id).shape}, rng));
      round_all(values.back(), step.type(in.id).dtype);
    }
    compare_emulated(step, values, backend_tolerance(DType::bf16, false));
  }
}

TEST_CASE("GPU plan: a layernorm forward is one kernel and its backward one row kernel plus one "
          "pass for the γ and β sums",
          "[emulated][fusion]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {64, 768}});
  Value gamma = input(g, "gamma", {DType::f32, {768}});
  Value beta = input(g, "beta", {DType::f32, {768}});
  g.add_output("y", layernorm(x, gamma, beta).id);
  GpuPlan forward(Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr));
  INFO(forward.plan.print());
  REQUIRE(forward.plan.kernels.size() == 1);
  CHECK(forward.count(KernelKind::row) == 1);
  CHECK(gpu_launch(forward.graph, forward.plan.kernels[0]).strategy ==
        GpuStrategy::warp_per_output);

  Graph dx = build_graph({{"x", {DType::f32, {64, 768}}, {}},
                          {"gamma", {DType::f32, {768}}, {}},
                          {"beta", {DType::f32, {768}}, {}},
                          {"r", {DType::f32, {64, 768}}, {}}},
                         [](Graph&, std::vector<Value>& in) {
                           return std::vector<Value>{sum(layernorm(in[0], in[1], in[2]) * in[3])};
                         });
  GpuPlan step(Pipeline::standard(AutodiffOptions{{"x", "gamma", "beta"}, 0})
                   .run(dx, DumpSelection(""), std::cerr));
  INFO(step.plan.print());
  CHECK(step.count(KernelKind::row) == 2); // forward (saving its statistics), backward
  std::size_t sibling_passes = 0;
  for (const Kernel& k : step.plan.kernels)
    sibling_passes += k.kind == KernelKind::reduce && !k.extra_outputs.empty();
  CHECK(sibling_passes == 1); // dγ and dβ folded in one pass
}

TEST_CASE("GPU plan: a GPT step's transformer block is at most 32 kernels forward and backward, "
          "AdamW merges the blocks' updates, and the loss reads the logits once (bf16 autocast, "
          "fused attention)",
          "[emulated][fusion]") {
  // The gpt recipe's step (clipping, AdamW, warm-up schedule) at depth 2. The GPU plan is the one
  // GpuExecutable would run on an sm_90 device. Kernels are counted by the model path of the
  // value they compute (`blocks.1.attn.attention.bwd` belongs to block 1).
  Init init(3);
  GPT model(GPTConfig{.vocab = 64, .context = 16, .dim = 32, .depth = 2, .heads = 2}, init);
  auto step = compile_step(
      model, [](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next); },
      adamw{.lr = 1e-3, .weight_decay = 0.1},
      {.schedule = warmup_cosine(1e-3, 10, 100), .clip_grad_norm = 1.0, .amp = amp::bf16});
  std::vector<double> ids(4 * 16);
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<double>((i * 7) % 64);
  HostTensor x = HostTensor::from_doubles(DType::i64, {4, 16}, ids);
  step(x, x);
  GpuPlan gpu(step.runtime().program().graph());
  INFO(gpu.plan.print());
  CHECK(gpu.count(KernelKind::attention) == 4);
  auto path_of = [&](const Kernel& k) {
    return gpu.graph.scope_path(gpu.graph.node(k.root).scope);
  };
  std::map<std::string, std::size_t> per_block, rows_per_block;
  std::size_t optimizer_block_kernels = 0;
  for (const Kernel& k : gpu.plan.kernels) {
    std::string path = path_of(k);
    if (path.starts_with("optimizer.blocks.")) ++optimizer_block_kernels;
    if (!path.starts_with("blocks.")) continue;
    std::string block = path.substr(0, path.find('.', std::string("blocks.").size()));
    ++per_block[block];
    rows_per_block[block] += k.kind == KernelKind::row;
  }
  REQUIRE(per_block.size() == 2);
  for (const auto& [block, count] : per_block) {
    INFO(block);
    CHECK(count <= 32);
    CHECK(rows_per_block[block] == 4); // two layernorms, forward and backward
  }
  // 24 parameter tensors of the blocks, updated in merged passes (≤ 128 buffers each).
  CHECK(optimizer_block_kernels <= 8);
  // No kernel only converts: every cast (the logits' gradient to bf16, working copies) is written
  // by the kernel that computes the value.
  for (const Kernel& k : gpu.plan.kernels) {
    bool casts = false, computes = false;
    for (ValueId v : k.body) {
      OpId op = gpu.graph.node(v).op;
      casts = casts || op == OpId::cast;
      computes = computes || !(op == OpId::cast || op == OpId::reshape || op == OpId::broadcast ||
                               op == OpId::permute);
    }
    INFO("kernel of %" << k.root);
    CHECK((!casts || computes || k.kind != KernelKind::loop));
  }
  // Every buffer a kernel writes is read by another kernel or returned (merges leave none
  // behind: GELU's backward used to write a product of its own terms nothing read, as an extra
  // output and, with the GEMM operands kept, as its root), recomputing the GEMM operands or not.
  GpuPlan kept(step.runtime().program().graph(), true);
  for (const GpuPlan* each : {&gpu, &kept}) {
    const FusionPlan& plan = each->plan;
    INFO((each == &kept ? "operands kept" : "operands recomputed"));
    for (std::size_t k = 0; k < plan.kernels.size(); ++k)
      for (ValueId out : plan.kernels[k].outputs()) {
        bool used = std::any_of(each->graph.outputs().begin(), each->graph.outputs().end(),
                                [&](const NamedValue& o) { return plan.view_of[o.id] == out; });
        for (std::size_t j = 0; j < plan.kernels.size() && !used; ++j)
          for (ValueId r : plan.kernels[j].reads)
            used = used || (j != k && (r == out || plan.view_of[r] == out));
        INFO("kernel " << k << " writes %" << out);
        CHECK(used);
      }
  }
  CHECK(kept.plan.kernels.size() < gpu.plan.kernels.size()); // no kernels that recompute
  // The loss's forward reads the logits in one pass: the picked logit (the sum of logits times
  // the one-hot labels) joins the row kernel of the log-sum-exp.
  std::optional<ValueId> logits;
  for (const Kernel& k : gpu.plan.kernels)
    if (k.kind == KernelKind::gemm && path_of(k) == "head") logits = k.root;
  REQUIRE(logits);
  std::size_t reductions_of_logits = 0;
  for (const Kernel& k : gpu.plan.kernels)
    if ((k.kind == KernelKind::row || k.kind == KernelKind::reduce) &&
        std::find(k.reads.begin(), k.reads.end(), *logits) != k.reads.end())
      ++reductions_of_logits;
  CHECK(reductions_of_logits == 1);
}

} // namespace sinter::testing
