// tests/test_ptx_generated.cpp — every registered op's kernels (forward, gradients; f64, f32, bf16,
// f16) compiled to PTX for sm_80 and sm_90 and assembled by ptxas, plus the code the GPU gets
#include "backend_check.hpp"
#include "op_test_registry.hpp"
#include "ptx_check.hpp"

#include "env_override.hpp"

#include "jit/backend/cuda/cuda_device.hpp"
#include "jit/backend/cuda/gemm_epilogue.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/passes/passes.hpp"
#include "kernels/cuda/non_finite_scan.hpp"
#include "kernels/cuda/nvjitlink.hpp"

#include <catch2/catch.hpp>

#include <functional>
#include <sstream>
#include <thread>

namespace sinter::testing {
namespace {

Graph optimized(const Graph& g) {
  return Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr);
}

void forward_ptx(OpId op) {
  for_each_forward_case(op,
                        [](const Graph& g, const std::vector<F64Tensor>&, DType) { check_ptx(g); });
}

void gradient_ptx(OpId op) {
  for_each_gradient_case(
      op, [](const Graph& g, const std::vector<F64Tensor>&, DType) { check_ptx(g); });
}

const bool forward_registered = register_op_tests<forward_ptx>(
    "kernels compile to PTX that ptxas accepts (sm_80, sm_90)", "[ptx][ptx-forward]");
const bool gradient_registered = register_op_tests<gradient_ptx>(
    "gradient kernels compile to PTX that ptxas accepts (sm_80, sm_90)", "[ptx][ptx-gradient]",
    differentiable_op);

/// The PTX of the one generated kernel of a graph with one output.
std::string only_kernel_ptx(const Graph& g, int capability = 90) {
  FusionPlan plan = fuse(g);
  for (const Kernel& k : plan.kernels)
    if (k.kind != KernelKind::gemm) return nvptx_target(capability).compile(plan, k, "k");
  FAIL("no generated kernel");
  return {};
}

TEST_CASE("gpu: a layernorm row kernel reads and writes 16 bytes at a time and combines the row "
          "in warp shuffles (f32, bf16)",
          "[ptx]") {
  static TempDir dir("sinter-ptx-rows");
  std::optional<std::filesystem::path> ptxas = find_ptxas();
  REQUIRE(ptxas);
  for (DType t : {DType::f32, DType::bf16}) {
    INFO(dtype_name(t));
    Graph g;
    Value x = input(g, "x", {t, {64, 768}});
    Value gamma = input(g, "gamma", {t, {768}});
    Value beta = input(g, "beta", {t, {768}});
    g.add_output("y", layernorm(x, gamma, beta).id);
    Graph o = optimized(g);
    FusionPlan plan = fuse(o, gpu_fusion_options);
    REQUIRE(plan.kernels.size() == 1);
    REQUIRE(plan.kernels[0].kind == KernelKind::row);
    GpuLaunch launch = gpu_launch(o, plan.kernels[0]);
    CHECK(launch.strategy == GpuStrategy::warp_per_output);
    CHECK(launch.vector_width == (t == DType::f32 ? 4 : 8));
    std::string ptx = nvptx_target(90).compile(plan, plan.kernels[0], "row");
    INFO(ptx);
    CHECK(ptx.find("shfl.sync.bfly") != std::string::npos);
    CHECK(ptx.find(t == DType::f32 ? "ld.global.nc.v4.f32" : "ld.global.nc.v4") !=
          std::string::npos);
    CHECK(ptx.find("st.global.v4") != std::string::npos);
    CHECK(ptx.find(".local") == std::string::npos);
    PtxasResult assembled = run_ptxas(*ptxas, ptx, "sm_90", dir.path);
    INFO(assembled.log);
    CHECK(assembled.ok);
  }
}

TEST_CASE("gpu: elementwise f32 kernels use 16-byte loads and stores", "[ptx]") {
  Graph g;
  Value a = input(g, "a", {DType::f32, {64, 256}});
  Value b = input(g, "b", {DType::f32, {64, 256}});
  g.add_output("c", (a * b + a).id);
  FusionPlan plan = fuse(g);
  REQUIRE(gpu_launch(g, plan.kernels[0]).vector_width == 4);
  std::string ptx = only_kernel_ptx(g);
  CHECK(ptx.find("ld.global.nc.v4.f32") != std::string::npos);
  CHECK(ptx.find("st.global.v4.f32") != std::string::npos);
  // An odd inner size falls back to one element per thread.
  Graph odd;
  Value x = input(odd, "x", {DType::f32, {7, 5}});
  odd.add_output("y", (x * x).id);
  CHECK(gpu_launch(odd, fuse(odd).kernels[0]).vector_width == 1);
}

/// The global loads and stores of `ptx` that move one element each (no `.v2` / `.v4`).
std::vector<std::string> scalar_global_accesses(const std::string& ptx) {
  std::vector<std::string> found;
  std::istringstream lines(ptx);
  for (std::string line; std::getline(lines, line);) {
    bool global =
        line.find("ld.global") != std::string::npos || line.find("st.global") != std::string::npos;
    if (global && line.find(".v2") == std::string::npos && line.find(".v4") == std::string::npos)
      found.push_back(line);
  }
  return found;
}

TEST_CASE("gpu: the elementwise kernels of every unary and binary op, forward and gradient, read "
          "and write 16 bytes at a time (f32, bf16, f16)",
          "[ptx]") {
  // Math from libdevice must not split the load/store vectoriser's chains: tanhf's inline
  // reciprocal once left GELU's bf16 kernels reading two bytes at a time.
  std::vector<std::pair<std::string, std::function<Value(Value, Value)>>> ops;
#define SINTER_UNARY_PRIMITIVE(name)                                                               \
  ops.emplace_back(#name, [](Value x, Value) { return name(x); });
#define SINTER_UNARY_COMPOSITE(name) SINTER_UNARY_PRIMITIVE(name)
#define SINTER_BINARY_PRIMITIVE(name)                                                              \
  ops.emplace_back(#name, [](Value x, Value y) { return name(x, y); });
#define SINTER_COMPARISON_PRIMITIVE(name)
#define SINTER_COMPARISON_COMPOSITE(name)
#define SINTER_PRIMITIVE(name)
#define SINTER_COMPOSITE(name)
#include "ops/op_list.def"
#undef SINTER_PRIMITIVE
#undef SINTER_COMPOSITE
  REQUIRE(ops.size() >= 15);
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    for (const auto& [name, op] : ops) {
      INFO(name << " " << dtype_name(t));
      Graph g;
      Value x = input(g, "x", {t, {64, 256}});
      Value y = input(g, "y", {t, {64, 256}});
      Value r = input(g, "r", {t, {64, 256}});
      Value z = op(x, y);
      g.add_output("z", z.id);
      g.add_output("loss", sum(cast(z * r, DType::f32)).id);
      Graph step =
          Pipeline::standard(AutodiffOptions{{"x", "y"}, 0}).run(g, DumpSelection(""), std::cerr);
      FusionPlan plan = fuse(step, gpu_fusion_options);
      int loops = 0;
      for (const Kernel& k : plan.kernels) {
        if (k.kind != KernelKind::loop) continue;
        ++loops;
        REQUIRE(gpu_launch(step, k).vector_width > 1);
        std::string ptx = nvptx_target(90).compile(plan, k, "elementwise");
        INFO(ptx);
        CHECK(scalar_global_accesses(ptx).empty());
      }
      CHECK(loops > 0);
    }
}

TEST_CASE("gpu: a layernorm row kernel that also writes the residual stream as [B, T, C] reads "
          "its [C] and [T, C] broadcasts and writes both outputs 16 bytes at a time",
          "[ptx]") {
  // A ViT block: residual + projection (a GEMM's [B·T, C] result) + bias + position table,
  // normalised for the next GEMM. The residual's [B, T, C] index comes from the row's through
  // the reshape, not from its flat offset: `flat % C` hides that neighbours are adjacent.
  Graph g;
  Value residual = input(g, "residual", {DType::f32, {4, 64, 768}});
  Value projected = input(g, "projected", {DType::bf16, {256, 768}});
  Value position = input(g, "position", {DType::bf16, {64, 768}});
  Value bias = input(g, "bias", {DType::f32, {768}});
  Value gamma = input(g, "gamma", {DType::f32, {768}});
  Value beta = input(g, "beta", {DType::f32, {768}});
  Value stream = residual + cast(reshape(projected, {4, 64, 768}) + position, DType::f32) + bias;
  g.add_output("stream", stream.id);
  g.add_output("normed", cast(reshape(layernorm(stream, gamma, beta), {256, 768}), DType::bf16).id);
  Graph o = optimized(g);
  FusionPlan plan = fuse(o, gpu_fusion_options);
  INFO(plan.print());
  const Kernel* row = nullptr;
  for (const Kernel& k : plan.kernels)
    if (k.kind == KernelKind::row) row = &k;
  REQUIRE(row);
  REQUIRE(row->outputs().size() == 2);
  REQUIRE(o.type(row->outputs()[0]).shape != o.type(row->outputs()[1]).shape);
  std::string ptx = nvptx_target(90).compile(plan, *row, "row");
  INFO(ptx);
  CHECK(scalar_global_accesses(ptx).empty());
}

TEST_CASE("gpu: a kernel written over its input in place still reads and writes 16 bytes at a "
          "time, and reads its other buffers through the non-coherent cache",
          "[ptx]") {
  for (DType t : {DType::f32, DType::bf16}) {
    INFO(dtype_name(t));
    Graph g;
    Value a = input(g, "a", {t, {64, 256}});
    Value w = input(g, "w", {t, {256, 256}});
    Value bias = input(g, "bias", {t, {64, 256}});
    // The GEMM's result is read once, by the loop, which may write over it (an intermediate
    // the next GEMM reads).
    g.add_output("y", matmul(exp(matmul(a, w)) * bias, w).id);
    Graph o = optimized(g);
    FusionPlan plan = fuse(o, gpu_fusion_options);
    const Kernel* loop = nullptr;
    for (const Kernel& k : plan.kernels)
      if (k.kind == KernelKind::loop) loop = &k;
    REQUIRE(loop);
    REQUIRE(loop->in_place());
    std::string ptx = nvptx_target(90).compile(plan, *loop, "in_place");
    INFO(ptx);
    const char* vector_load = t == DType::f32 ? "ld.global.v4.f32" : "ld.global.v4.b32";
    CHECK(ptx.find(vector_load) != std::string::npos);       // the buffer written over
    CHECK(ptx.find("ld.global.nc.v4") != std::string::npos); // the bias
    CHECK(ptx.find("st.global.v4") != std::string::npos);
  }
}

TEST_CASE("gpu: an update stored over the input it replaces reads that input through the "
          "coherent path, the others through the non-coherent cache",
          "[ptx]") {
  Graph g;
  Value p = input(g, "p", {DType::f32, {4096}});
  Value grad = input(g, "g", {DType::f32, {4096}});
  g.add_output("new.p", (p - grad * 0.01).id);
  g.donate(0, 0);
  Graph o = optimized(g);
  FusionPlan plan = fuse(o, gpu_fusion_options);
  REQUIRE(plan.kernels.size() == 1);
  const Kernel& update = plan.kernels.front();
  REQUIRE(update.over_inputs.size() == 1);
  std::string ptx = nvptx_target(90).compile(plan, update, "update");
  INFO(ptx);
  // p is written where it is read: never through the read-only cache; g is.
  CHECK(ptx.find("ld.global.v4.f32") != std::string::npos);
  CHECK(ptx.find("ld.global.nc.v4.f32") != std::string::npos);
  CHECK(ptx.find("st.global.v4.f32") != std::string::npos);
  CHECK(check_ptx(o) == 1);
}

TEST_CASE("gpu: a loss over 4096 classes keeps each row of logits in dynamic shared memory for "
          "its later passes, and ptxas takes it",
          "[ptx]") {
  Graph g;
  Value x = input(g, "x", {DType::bf16, {4, 16, 16}});
  Value w = input(g, "w", {DType::bf16, {16, 4096}});
  Value labels = input(g, "labels", {DType::i32, {4, 16}});
  g.add_output("loss", cross_entropy_mean(matmul(x, w), labels).id);
  Graph o = Pipeline::standard(AutodiffOptions{{"x", "w"}, 0}).run(g, DumpSelection(""), std::cerr);
  CompileRun run("loss", false, DumpSelection(""));
  Prepared prepared = prepare_for_nvptx(o, 90, run);
  const FusionPlan& plan = prepared.fusion;
  const Kernel* rows = nullptr;
  for (const Kernel& k : plan.kernels)
    if (k.kind == KernelKind::row &&
        gpu_launch(*plan.graph, k).strategy == GpuStrategy::block_per_output)
      rows = &k;
  REQUIRE(rows);
  CHECK(gpu_launch(*plan.graph, *rows).shared_bytes == 4096 * 2);
  std::string ptx = nvptx_target(90).compile(plan, *rows, "loss_rows");
  INFO(ptx);
  CHECK(ptx.find(".extern .shared .align 16 .b8 loss_rows_row_cache[]") != std::string::npos);
  CHECK(ptx.find("st.shared") != std::string::npos); // the first pass keeps the row
  CHECK(ptx.find("ld.shared") != std::string::npos); // the later ones read it back
  CHECK(check_ptx(o) > 0);
}

TEST_CASE("gpu: reductions pick threads, warps or blocks by length", "[ptx]") {
  auto strategy_for = [](Shape shape, int64_t axis) {
    Graph g;
    Value x = input(g, "x", {DType::f32, shape});
    g.add_output("s", sum(exp(x), {axis}).id);
    Graph lowered = optimized(g);
    check_ptx(lowered); // and ptxas accepts every strategy's code
    FusionPlan plan = fuse(lowered);
    return std::make_pair(gpu_launch(lowered, plan.kernels.back()).strategy,
                          only_kernel_ptx(lowered));
  };
  auto [short_rows, short_ptx] = strategy_for({512, 10}, 1);
  CHECK(short_rows == GpuStrategy::thread_per_output);
  auto [rows, warp_ptx] = strategy_for({64, 768}, 1);
  CHECK(rows == GpuStrategy::warp_per_output);
  CHECK(warp_ptx.find("shfl.sync.bfly") != std::string::npos);
  CHECK(warp_ptx.find("bar.sync") == std::string::npos);
  auto [long_rows, block_ptx] = strategy_for({4, 50000}, 1);
  CHECK(long_rows == GpuStrategy::block_per_output);
  CHECK(block_ptx.find("shfl.sync.bfly") != std::string::npos);
  CHECK(block_ptx.find("bar.sync") != std::string::npos);
  CHECK(block_ptx.find(".shared") != std::string::npos);
  auto [columns, column_ptx] = strategy_for({4096, 64}, 0);
  CHECK(columns == GpuStrategy::column_split);
  CHECK(column_ptx.find("bar.sync") != std::string::npos);
  CHECK(column_ptx.find(".shared") != std::string::npos);
  auto [few_rows, few_rows_ptx] = strategy_for({16, 64}, 0);
  CHECK(few_rows == GpuStrategy::thread_per_output);
  // Math comes from libdevice, inlined: no calls are left for the driver to resolve.
  CHECK(block_ptx.find("__nv_expf") == std::string::npos);
}

TEST_CASE("gpu: a column reduction's lanes load 16 bytes of neighbouring columns a row (8 bf16, "
          "4 f32), and ptxas accepts it",
          "[ptx]") {
  for (auto [t, width] : {std::pair{DType::bf16, 8}, std::pair{DType::f32, 4}}) {
    INFO(dtype_name(t));
    Graph g;
    Value dy = input(g, "dy", {t, {16, 65536}});
    g.add_output("db", emit(OpId::reduce_sum, {cast(dy, DType::f32)}, Attrs{.ints = {0}}).id);
    check_ptx(g);
    FusionPlan plan = fuse(g);
    GpuLaunch launch = gpu_launch(g, plan.kernels.back());
    CHECK(launch.strategy == GpuStrategy::column_split);
    CHECK(launch.vector_width == width);
    std::string ptx = only_kernel_ptx(g);
    CHECK(ptx.find("ld.global.nc.v4") != std::string::npos);
    CHECK(ptx.find("bar.sync") != std::string::npos);
  }
}

TEST_CASE("gpu: scatter_add accumulates with atomics after the runtime clears the output",
          "[ptx]") {
  Graph g;
  Value ids = input(g, "ids", {DType::i32, {8}});
  Value upd = input(g, "u", {DType::f32, {8, 16}});
  g.add_output("t", emit(OpId::scatter_add, {ids, upd}, Attrs{.ints = {100}}).id);
  FusionPlan plan = fuse(g);
  GpuLaunch launch = gpu_launch(g, plan.kernels.back());
  CHECK(launch.strategy == GpuStrategy::atomic_scatter);
  CHECK(launch.zero_output_first);
  CHECK(only_kernel_ptx(g, 80).find("atom.global.add.f32") != std::string::npos);
}

TEST_CASE("gpu: bias and bias+ReLU kernels after GEMMs become cuBLASLt epilogues", "[ptx]") {
  auto epilogues_of = [](Graph& g) {
    static std::vector<std::unique_ptr<Graph>> keep; // the plan points into its graph
    keep.push_back(std::make_unique<Graph>(optimized(g)));
    FusionPlan plan = fuse(*keep.back());
    MemoryPlan memory(plan);
    return std::make_pair(find_gemm_epilogues(plan, memory), plan);
  };
  SECTION("an MLP's forward pass: bias + ReLU, then bias") {
    Graph g;
    Value x = input(g, "x", {DType::f32, {256, 784}});
    Value w1 = input(g, "w1", {DType::f32, {784, 1024}}), b1 = input(g, "b1", {DType::f32, {1024}});
    Value w2 = input(g, "w2", {DType::f32, {1024, 10}}), b2 = input(g, "b2", {DType::f32, {10}});
    g.add_output("logits", (matmul(relu(matmul(x, w1) + b1), w2) + b2).id);
    auto [found, plan] = epilogues_of(g);
    REQUIRE(found.size() == 2);
    CHECK(found[0].kind == EpilogueKind::relu_bias);
    CHECK(found[1].kind == EpilogueKind::bias);
    for (const GemmEpilogue& e : found) {
      CHECK(plan.kernels[e.gemm].kind == KernelKind::gemm);
      CHECK(e.absorbed == e.gemm + 1);
      CHECK(plan.graph->node(e.bias).op == OpId::input);
    }
  }
  SECTION("a training step: bias gradients ride on the weight-gradient GEMMs; no bias epilogue, "
          "since ReLU's backward re-reads the product") {
    Graph g;
    Value x = input(g, "x", {DType::f32, {256, 784}});
    Value labels = input(g, "labels", {DType::i64, {256}});
    Value w1 = input(g, "w1", {DType::f32, {784, 1024}}), b1 = input(g, "b1", {DType::f32, {1024}});
    Value w2 = input(g, "w2", {DType::f32, {1024, 10}}), b2 = input(g, "b2", {DType::f32, {10}});
    g.add_output("loss", cross_entropy_mean(matmul(relu(matmul(x, w1) + b1), w2) + b2, labels).id);
    Graph step = Pipeline::standard(AutodiffOptions{{"w1", "b1", "w2", "b2"}, 0})
                     .run(g, DumpSelection(""), std::cerr);
    FusionPlan plan = fuse(step);
    auto found = find_gemm_epilogues(plan, MemoryPlan(plan));
    REQUIRE(found.size() == 2);
    for (const GemmEpilogue& e : found) {
      CHECK(e.kind == EpilogueKind::bias_gradient);
      const Kernel& reduce = plan.kernels[e.absorbed];
      const Kernel& gemm = plan.kernels[e.gemm];
      CHECK(reduce.kind == KernelKind::reduce);
      CHECK(e.absorbed < e.gemm);
      CHECK(gemm.gemm_b.buffer == step.node(reduce.root).inputs[0]);
      CHECK_FALSE(gemm.gemm_b.transposed);
      // The bias gradient has shape [out features] = the GEMM's n.
      CHECK(step.type(reduce.root).shape.back() == step.type(gemm.root).shape.back());
    }
  }
  SECTION("mixed precision and 3-D activations: the bias gradient, a bf16 sum of a bf16 dY as "
          "PyTorch's autocast sums it, rides on the weight-gradient GEMM too") {
    Graph step = mixed_precision_linear_step();
    // As in a training step, what reads the f32 gradients (here an fp16 step's unscaling; an
    // optimizer's update) runs after the backward's GEMMs, and the widening joins it. (A graph
    // that returns the widened gradient itself widens it right after the sum, before the GEMM
    // could write that sum: it keeps the column sum.)
    Value unscale = input(step, "unscale", {DType::f32, {}});
    for (NamedValue& out : step.mutable_outputs())
      if (out.name != "loss") out.id = (Value{&step, out.id} * unscale).id;
    FusionPlan plan = fuse(step);
    INFO(plan.print());
    auto found = find_gemm_epilogues(plan, MemoryPlan(plan));
    REQUIRE(found.size() == 1);
    const GemmEpilogue& e = found[0];
    CHECK(e.kind == EpilogueKind::bias_gradient);
    const Kernel& reduce = plan.kernels[e.absorbed];
    const Kernel& gemm = plan.kernels[e.gemm];
    ValueId dy = reduce.reads[0];
    CHECK(step.type(dy).dtype == DType::bf16);
    CHECK(step.type(dy).shape.size() == 3);
    // Summed in the GEMM's type (cuBLASLt's bias-gradient vector has the output's type), then
    // widened for the f32 master bias.
    CHECK(step.type(reduce.root) == TensorType{DType::bf16, {48}});
    bool widened = false;
    for (ValueId id = 0; id < step.size(); ++id)
      widened |= step.node(id).op == OpId::cast && step.node(id).inputs[0] == reduce.root &&
                 step.type(id) == TensorType{DType::f32, {48}};
    CHECK(widened);
    CHECK(gemm.gemm_b.buffer == dy);
    CHECK(step.type(gemm.root).dtype == DType::bf16);
  }
  SECTION("a linear layer's output: bias only") {
    Graph g;
    Value x = input(g, "x", {DType::f32, {64, 32}});
    Value w = input(g, "w", {DType::f32, {32, 16}}), b = input(g, "b", {DType::f32, {16}});
    g.add_output("y", (matmul(x, w) + b).id);
    auto [found, plan] = epilogues_of(g);
    REQUIRE(found.size() == 1);
    CHECK(found[0].kind == EpilogueKind::bias);
  }
  SECTION("GELU (tanh form) is recognised from its lowering; other activations are not") {
    auto layer = [](Value (*activation)(Value)) {
      auto g = std::make_unique<Graph>();
      Value x = input(*g, "x", {DType::f32, {64, 32}});
      Value w = input(*g, "w", {DType::f32, {32, 16}}), b = input(*g, "b", {DType::f32, {16}});
      g->add_output("y", activation(matmul(x, w) + b).id);
      return g;
    };
    auto gelu = layer([](Value v) { return gelu_tanh(v); });
    auto [found, plan] = epilogues_of(*gelu);
    REQUIRE(found.size() == 1);
    CHECK(found[0].kind == EpilogueKind::gelu_bias);
    CHECK(epilogues_of(*layer([](Value v) { return gelu_erf(v); })).first.empty());
    CHECK(epilogues_of(*layer([](Value v) { return tanh(v); })).first.empty());
  }
  SECTION("mixed precision: a bf16 product, a bias widened or narrowed to the sum's type, GELU "
          "in f32 or bf16 and the result narrowed back") {
    // A forward-only bf16 layer (a distillation teacher's MLP): the bf16 bias widened to f32,
    // GELU in f32, the result back to bf16.
    Graph teacher;
    Value x = input(teacher, "x", {DType::bf16, {64, 32}});
    Value w = input(teacher, "w", {DType::bf16, {32, 16}});
    Value b = input(teacher, "b", {DType::bf16, {16}});
    Value z = cast(reshape(matmul(x, w), {4, 16, 16}), DType::f32) + cast(b, DType::f32);
    teacher.add_output("y", reshape(cast(gelu_tanh(z), DType::bf16), {64, 16}).id);
    auto [found, plan] = epilogues_of(teacher);
    INFO(plan.print());
    REQUIRE(found.size() == 1);
    CHECK(found[0].kind == EpilogueKind::gelu_bias);
    CHECK(plan.graph->type(found[0].bias) == TensorType{DType::bf16, {16}});
    // Autocast's linear layer: the f32 master bias narrowed to bf16, GELU in bf16.
    Graph student;
    Value sx = input(student, "x", {DType::bf16, {64, 32}});
    Value sw = input(student, "w", {DType::bf16, {32, 16}});
    Value sb = input(student, "b", {DType::f32, {16}});
    student.add_output("y", gelu_tanh(matmul(sx, sw) + cast(sb, DType::bf16)).id);
    auto [narrowed, student_plan] = epilogues_of(student);
    INFO(student_plan.print());
    REQUIRE(narrowed.size() == 1);
    CHECK(narrowed[0].kind == EpilogueKind::gelu_bias);
    CHECK(student_plan.graph->type(narrowed[0].bias).dtype == DType::f32);
    // A cast to an integer in between is no epilogue's.
    Graph rounded;
    Value rx = input(rounded, "x", {DType::f32, {64, 32}});
    Value rw = input(rounded, "w", {DType::f32, {32, 16}});
    Value rb = input(rounded, "b", {DType::f32, {16}});
    rounded.add_output("y", (cast(cast(matmul(rx, rw), DType::i32), DType::f32) + rb).id);
    CHECK(epilogues_of(rounded).first.empty());
  }
  SECTION("training with GELU: its pre-activation is stored, written beside GELU's output by "
          "GELU_AUX_BIAS and read back by the backward GEMM's DGELU") {
    Graph step = mixed_precision_gelu_mlp_step();
    for (bool stored : {true, false}) {
      INFO((stored ? "pre-activation stored" : "gemm_gelu_pre_activation off"));
      FusionOptions options = gpu_fusion_options;
      options.gemm_gelu_pre_activation = stored;
      FusionPlan plan = fuse(step, options);
      INFO(plan.print());
      std::vector<GemmEpilogue> found = find_gemm_epilogues(plan, MemoryPlan(plan));
      std::vector<const GemmEpilogue*> aux_bias, gradient;
      for (const GemmEpilogue& e : found) {
        if (e.kind == EpilogueKind::gelu_aux_bias) aux_bias.push_back(&e);
        if (e.kind == EpilogueKind::gelu_gradient) gradient.push_back(&e);
      }
      if (!stored) {
        CHECK(aux_bias.empty());
        CHECK(gradient.empty());
        continue;
      }
      REQUIRE(aux_bias.size() == 1);
      REQUIRE(gradient.size() == 1);
      // One matrix: written by the forward GEMM, read by the backward one.
      ValueId pre_activation = aux_bias[0]->aux;
      CHECK(gradient[0]->aux == pre_activation);
      CHECK(plan.graph->type(pre_activation) == TensorType{DType::bf16, {4, 64, 64}});
      CHECK(plan.graph->node(pre_activation).op == OpId::add);
      CHECK(plan.kernels[aux_bias[0]->absorbed].outputs().size() == 2);
      // DGELU writes GELU's input gradient where the GEMM's product was (in place over it).
      const Kernel& loop = plan.kernels[gradient[0]->absorbed];
      CHECK(loop.overwrites == plan.kernels[gradient[0]->gemm].root);
      CHECK(gradient[0]->gemm < gradient[0]->absorbed);
    }
  }
  SECTION("not when the product itself is also needed, or the added row is not a bias") {
    Graph g;
    Value x = input(g, "x", {DType::f32, {64, 32}});
    Value w = input(g, "w", {DType::f32, {32, 16}}), b = input(g, "b", {DType::f32, {16}});
    Value p = matmul(x, w);
    g.add_output("p", p.id);
    g.add_output("y", (p + b).id);
    CHECK(epilogues_of(g).first.empty());
    Graph h;
    Value hx = input(h, "x", {DType::f32, {64, 32}});
    Value hw = input(h, "w", {DType::f32, {32, 16}}), hc = input(h, "c", {DType::f32, {64, 1}});
    h.add_output("y", (matmul(hx, hw) + hc).id); // a column, not a row: no epilogue for it
    CHECK(epilogues_of(h).first.empty());
  }
}

TEST_CASE("gpu: the ptxas check rejects broken PTX", "[ptx]") {
  auto ptxas = find_ptxas();
  if (!ptxas) return; // nothing to check without the toolkit; check_ptx warns about it
  TempDir dir("sinter-ptxas");
  CHECK_FALSE(
      run_ptxas(*ptxas, ".version 8.0\n.target sm_90\nnot ptx at all\n", "sm_90", dir.path).ok);
}

TEST_CASE("gpu: the hand-written --check-numerics scan assembles for every GPU CI checks",
          "[ptx]") {
  auto ptxas = find_ptxas();
  if (!ptxas) return; // nothing to check without the toolkit; check_ptx warns about it
  TempDir dir("sinter-ptxas-scan");
  for (const char* arch : {"sm_75", "sm_80", "sm_90"}) {
    PtxasResult r = run_ptxas(*ptxas, std::string(kernels::non_finite_scan_ptx()), arch, dir.path);
    INFO(arch << ": " << r.log);
    CHECK(r.ok);
  }
  CHECK(kernels::exponent_mask(DType::bf16) == 0x7F80);
  CHECK(kernels::exponent_mask(DType::i32) == 0); // not scanned
  CHECK(kernels::first_non_finite_index(0) == std::nullopt);
  CHECK(kernels::first_non_finite_index(~uint64_t{41}) == 41);
}

TEST_CASE("gpu: a capability LLVM does not know is refused by name", "[ptx]") {
  CHECK_THROWS_WITH(NvptxTarget(12), Catch::Contains("sm_12"));
}

TEST_CASE("gpu: a GPU newer than LLVM's NVPTX gets PTX for the newest known target", "[ptx]") {
  CHECK(NvptxTarget::supports(80));
  CHECK(NvptxTarget::supports(90));
  CHECK_FALSE(NvptxTarget::supports(12));
  CHECK(NvptxTarget::best_target_for(90) == 90);
  CHECK(NvptxTarget::best_target_for(86) == 86);
  int newest = NvptxTarget::best_target_for(200); // no such GPU yet
  CHECK(newest >= 90);
  CHECK(NvptxTarget::supports(newest));
  CHECK_THROWS_WITH(NvptxTarget::best_target_for(30), Catch::Contains("sm_50"));
}

TEST_CASE("gpu: the target fingerprint names the arch and differs between them", "[ptx]") {
  CHECK(nvptx_target(80).fingerprint().find("sm_80") != std::string::npos);
  CHECK(nvptx_target(80).fingerprint() != nvptx_target(90).fingerprint());
}

/// The PTX of the first generated kernel of a small step, for sm_90, named `symbol`.
std::string a_kernels_ptx(const std::string& symbol) {
  Graph g;
  Value x = input(g, "x", {DType::f32, {64, 256}});
  g.add_output("y", (exp(x) * 2.0).id);
  Graph optimized = Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr);
  CompileRun run("assembler", false, DumpSelection(""));
  Prepared prepared = prepare_for_nvptx(optimized, 90, run);
  for (const Kernel& kernel : prepared.fusion.kernels)
    if (kernel.kind != KernelKind::gemm)
      return nvptx_target(90).compile(prepared.fusion, kernel, symbol);
  FAIL("the step has no generated kernel");
  return {};
}

TEST_CASE("PTX assembled in the process: libnvJitLink makes a generated kernel's sm_90 cubin on "
          "two threads at once, the same bytes each, and refuses broken PTX with its log",
          "[ptx]") {
  const kernels::NvJitLink* assembler = ptx_assembler();
  INFO("no libnvJitLink beside the toolkit's ptxas: install the CUDA toolkit's nvJitLink, or set "
       "SINTER_LIBNVJITLINK");
  REQUIRE(assembler != nullptr);
  std::string ptx = a_kernels_ptx("sinter_probe");
  std::string one, two, errors_one, errors_two;
  bool ok_one = false, ok_two = false;
  std::thread first([&] { ok_one = assembler->assemble(ptx, "sm_90", one, errors_one); });
  std::thread second([&] { ok_two = assembler->assemble(ptx, "sm_90", two, errors_two); });
  first.join();
  second.join();
  INFO(errors_one << errors_two);
  REQUIRE(ok_one);
  REQUIRE(ok_two);
  CHECK(one.compare(0, 4,
                    "\x7f"
                    "ELF") == 0);
  CHECK(one == two);
  CHECK(one.find("sinter_probe") != std::string::npos); // the entry, in its symbol table
  std::string cubin, errors;
  CHECK_FALSE(assembler->assemble(ptx + "\n.visible .entry broken() { not_an_instruction; }\n",
                                  "sm_90", cubin, errors));
  INFO(errors);
  CHECK((errors.find("not_an_instruction") != std::string::npos ||
         errors.find("broken") != std::string::npos));
}

TEST_CASE("SINTER_PTX_ASSEMBLER: driver leaves the PTX to the driver's JIT, another value is an "
          "error naming the choices",
          "[ptx]") {
  {
    EnvOverride driver("SINTER_PTX_ASSEMBLER", "driver");
    CHECK(ptx_assembler() == nullptr);
  }
  {
    EnvOverride jitlink("SINTER_PTX_ASSEMBLER", "jitlink");
    CHECK(ptx_assembler() != nullptr);
  }
  EnvOverride typo("SINTER_PTX_ASSEMBLER", "ptxas");
  CHECK_THROWS_WITH(ptx_assembler(), Catch::Contains("SINTER_PTX_ASSEMBLER='ptxas'") &&
                                         Catch::Contains("jitlink") && Catch::Contains("driver"));
}

} // namespace
} // namespace sinter::testing
