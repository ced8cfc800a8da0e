// tests/test_cpu_backend.cpp — fusion, memory planning, vector code and the persistent cache
#include "backend_check.hpp"
#include "jit/backend/cpu/cpu_target.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/runtime/kernel_lookup.hpp"
#include "jit/train/optimizer.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <numeric>
#include <set>
#include <sys/wait.h>
#include <unistd.h>

using namespace sinter;
using namespace sinter::testing;

namespace {

Graph optimized(const Graph& g, std::optional<AutodiffOptions> ad = std::nullopt) {
  return Pipeline::standard(std::move(ad)).run(g, DumpSelection(""), std::cerr);
}

/// MLP 784-1024-1024-10 training-step graph (forward + backward), batch `batch`.
Graph mlp_step_graph(int64_t batch, int64_t hidden = 1024) {
  Graph g;
  Value x = input(g, "x", {DType::f32, {batch, 784}});
  Value labels = input(g, "labels", {DType::i32, {batch}});
  Value w1 = input(g, "w1", {DType::f32, {784, hidden}});
  Value b1 = input(g, "b1", {DType::f32, {hidden}});
  Value w2 = input(g, "w2", {DType::f32, {hidden, hidden}});
  Value b2 = input(g, "b2", {DType::f32, {hidden}});
  Value w3 = input(g, "w3", {DType::f32, {hidden, 10}});
  Value b3 = input(g, "b3", {DType::f32, {10}});
  Value h1 = relu(matmul(x, w1) + b1);
  Value h2 = relu(matmul(h1, w2) + b2);
  g.add_output("loss", cross_entropy_mean(matmul(h2, w3) + b3, labels).id);
  return optimized(g, AutodiffOptions{{"w1", "b1", "w2", "b2", "w3", "b3"}, 0});
}

std::vector<HostTensor> random_inputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<HostTensor> out;
  for (const NamedValue& in : g.inputs()) {
    TensorType t = g.type(in.id);
    TestOperand spec{t.dtype, t.shape, -0.1, 0.1};
    if (!is_float(t.dtype)) spec = TestOperand{t.dtype, t.shape, 0, 10};
    out.push_back(from_f64(random_operand(spec, rng), t.dtype));
  }
  return out;
}

} // namespace

TEST_CASE("a chain of five elementwise ops becomes one kernel", "[cpu][fusion]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {64, 128}});
  Value b = input(g, "b", {DType::f32, {128}});
  g.add_output("y", tanh(exp(-(x + b) * 0.5) - 1.0).id);
  Graph opt = optimized(g); // the plan points into it: it must outlive the plan
  FusionPlan plan = fuse(opt);
  CHECK(plan.kernels.size() == 1);
  CHECK(plan.kernels[0].kind == KernelKind::loop);
}

TEST_CASE("an MLP training step fuses into at most 24 kernels", "[cpu][fusion]") {
  Graph g = mlp_step_graph(8, 32);
  FusionPlan plan = fuse(g);
  INFO(plan.print());
  std::size_t gemms = 0;
  for (const Kernel& k : plan.kernels)
    gemms += k.kind == KernelKind::gemm;
  CHECK(gemms == 8); // 3 forward, 5 backward (no gradient for x)
  CHECK(plan.kernels.size() <= 24);
}

TEST_CASE("a residual stream is stored, not recomputed in each layer from every earlier GEMM",
          "[cpu][fusion]") {
  // Twelve pre-norm residual layers: h += W·LN(h) + b. The stream's additions are cheap, so fusion
  // may recompute up to three of them where they are read (four GEMM outputs), never the whole
  // chain.
  Graph g;
  Value h = input(g, "x", {DType::f32, {16, 32}});
  Value gamma = input(g, "gamma", {DType::f32, {32}});
  Value beta = input(g, "beta", {DType::f32, {32}});
  for (int layer = 0; layer < 12; ++layer) {
    Value w = input(g, "w" + std::to_string(layer), {DType::f32, {32, 32}});
    Value b = input(g, "b" + std::to_string(layer), {DType::f32, {32}});
    h = h + (matmul(layernorm(h, gamma, beta), w) + b);
  }
  g.add_output("y", sum(h).id);
  Graph step = optimized(g);
  FusionPlan plan = fuse(step, FusionOptions{.row_kernels = true});
  INFO(plan.print());
  for (const Kernel& k : plan.kernels) {
    std::size_t gemm_outputs = 0;
    for (ValueId r : k.reads)
      gemm_outputs += plan.graph->node(r).op == OpId::matmul;
    CHECK(gemm_outputs <= 4);
  }
}

TEST_CASE("backward GEMMs read transposed operands in place", "[cpu][fusion]") {
  Graph g = mlp_step_graph(8, 32); // the plan points into it: it must outlive the plan
  FusionPlan plan = fuse(g);
  std::size_t transposed = 0;
  for (const Kernel& k : plan.kernels)
    if (k.kind == KernelKind::gemm) transposed += k.gemm_a.transposed + k.gemm_b.transposed;
  CHECK(transposed == 5);
  for (const Kernel& k : plan.kernels)
    CHECK(plan.graph->node(k.root).op != OpId::permute);
}

TEST_CASE("the memory plan reuses buffers and reports the peak", "[cpu][memory]") {
  Graph g = mlp_step_graph(256);
  FusionPlan plan = fuse(g);
  MemoryPlan memory(plan);
  INFO(memory.print());
  CHECK(memory.arena_bytes() < memory.unshared_bytes());
  int64_t output_bytes = 0;
  for (const NamedValue& out : g.outputs())
    output_bytes += (numel(g.type(out.id).shape) * 4 + 63) / 64 * 64;
  CHECK(memory.peak_bytes() == memory.arena_bytes() + output_bytes);
  // No two buffers alive at the same time overlap, except a kernel writing in place over a
  // buffer that dies in it.
  const auto& slots = memory.slots();
  std::size_t in_place = 0;
  for (std::size_t i = 0; i < slots.size(); ++i)
    for (std::size_t j = i + 1; j < slots.size(); ++j) {
      bool writes_over = plan.kernels[slots[j].first].overwrites == slots[i].node;
      in_place += writes_over;
      bool live_together =
          slots[i].first <= slots[j].last && slots[j].first <= slots[i].last && !writes_over;
      bool overlap = slots[i].offset < slots[j].offset + slots[j].bytes &&
                     slots[j].offset < slots[i].offset + slots[i].bytes;
      CHECK_FALSE((live_together && overlap));
    }
  CHECK(in_place >= 2); // the two ReLU gradients overwrite the GEMM outputs they read
}

TEST_CASE("AdamW's parameter, m and v updates are one kernel with three outputs", "[cpu][fusion]") {
  Graph g;
  Value p = input(g, "p", {DType::f32, {64, 32}});
  Value grad = input(g, "grad", {DType::f32, {64, 32}});
  UpdateResult u = append_update(g, {"p"}, {p}, {grad}, UpdateOptions{AdamW{}});
  g.add_output("new.p", u.parameters[0].parameter.id);
  g.add_output("new.m", u.parameters[0].state[0].id);
  g.add_output("new.v", u.parameters[0].state[1].id);
  Graph opt = optimized(g);
  FusionPlan plan = fuse(opt);
  INFO(plan.print());
  std::size_t full_size = 0;
  for (const Kernel& k : plan.kernels)
    if (plan.graph->type(k.root).shape == Shape{64, 32}) {
      ++full_size;
      CHECK(k.outputs().size() == 3);
    }
  CHECK(full_size == 1);
}

TEST_CASE("a sibling reading a buffer at another element stays a kernel of its own",
          "[cpu][fusion]") {
  // a = exp(x) is stored (expensive, two consumers). b reads it at the element it writes and
  // joins a's kernel; c reads it transposed, which needs all of a written first.
  Graph g;
  Value x = input(g, "x", {DType::f32, {16, 16}});
  Value a = exp(x);
  g.add_output("b", (a + 1.0).id);
  g.add_output("c", (transpose(a) * 2.0).id);
  Graph opt = optimized(g);
  FusionPlan plan = fuse(opt);
  INFO(plan.print());
  REQUIRE(plan.kernels.size() == 2);
  CHECK(plan.kernels[0].outputs().size() == 2);
  CHECK(plan.kernels[1].outputs().size() == 1);
  TestBackend backend;
  auto inputs = random_inputs(opt, 5);
  std::vector<F64Tensor> values{to_f64(inputs[0])};
  auto want = interpret(opt, values);
  auto got = CpuExecutable(opt, *backend.library, backend.pool).run(inputs);
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK(max_relative_difference(to_f64(got[i]), want[i]) < 1e-6);
}

TEST_CASE("fusion: large updates sharing only a scalar keep a kernel each on the GPU, and a "
          "working copy joins its update however far back",
          "[cpu][fusion]") {
  // u_k = p_k - lr · g_k for n parameters (all read the learning rate), then, with `copies`,
  // every bf16 working copy cast(u_k) after all the updates (as AMP's working copies come).
  auto updates = [](const Shape& shape, int n, bool copies) {
    Graph g;
    Value lr = input(g, "lr", {DType::f32, {}});
    std::vector<Value> updated;
    for (int k = 0; k < n; ++k) {
      Value p = input(g, "p" + std::to_string(k), {DType::f32, shape});
      Value grad = input(g, "g" + std::to_string(k), {DType::f32, shape});
      updated.push_back(p - broadcast_to(lr, shape) * grad);
      g.add_output("u" + std::to_string(k), updated.back().id);
    }
    if (copies)
      for (int k = 0; k < n; ++k)
        g.add_output("c" + std::to_string(k),
                     cast(updated[static_cast<std::size_t>(k)], DType::bf16).id);
    return optimized(g);
  };
  auto loops = [](const FusionPlan& plan) {
    std::vector<std::size_t> outputs;
    for (const Kernel& k : plan.kernels)
      if (k.kind == KernelKind::loop) outputs.push_back(k.outputs().size());
    return outputs;
  };
  const Shape large{520, 512}; // past gpu_fusion_options' 262144 elements
  Graph three = updates(large, 3, false);
  CHECK(loops(fuse(three, gpu_fusion_options)) == std::vector<std::size_t>{1, 1, 1});
  CHECK(loops(fuse(three, FusionOptions{})).size() == 1); // no limit: one pass
  Graph small = updates({768}, 3, false);
  CHECK(loops(fuse(small, gpu_fusion_options)) == std::vector<std::size_t>{3});
  // 40 updates: each copy is 40 kernels after its update, past the window merges look back.
  Graph copied = updates(large, 40, true);
  FusionPlan plan = fuse(copied, gpu_fusion_options);
  INFO(plan.print());
  CHECK(loops(plan) == std::vector<std::size_t>(40, 2));
}

TEST_CASE("a compiled MLP step matches the interpreter", "[cpu]") {
  TestBackend backend;
  Graph g = mlp_step_graph(16, 64);
  auto inputs = random_inputs(g, 3);
  std::vector<F64Tensor> values;
  for (const HostTensor& t : inputs)
    values.push_back(to_f64(t));
  auto want = interpret(g, values);
  CpuExecutable exe(g, *backend.library, backend.pool);
  auto got = exe.run(inputs);
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(g.outputs()[i].name);
    CHECK(max_relative_difference(to_f64(got[i]), want[i]) < 1e-5);
  }
}

TEST_CASE("elementwise kernels are vectorised", "[cpu][codegen]") {
  TestBackend backend;
  Graph g;
  Value x = input(g, "x", {DType::f32, {256, 1024}});
  Value y = input(g, "y", {DType::f32, {256, 1024}});
  g.add_output("z", (x * y + x * 0.5).id);
  Graph o = optimized(g);
  FusionPlan plan = fuse(o);
  std::string assembly;
  backend.library->target().compile(plan, plan.kernels[0], "vector_check", &assembly);
  INFO(assembly.substr(0, 4000));
  bool packed = assembly.find("ps\t%ymm") != std::string::npos ||
                assembly.find("ps\t%zmm") != std::string::npos ||
                assembly.find("ps\t%xmm") != std::string::npos;
  CHECK(packed);
}

TEST_CASE("kernels are named after their model path and role", "[cpu][cache]") {
  // A traced block: scopes name the model path, lowering names the composite, autodiff marks
  // gradient code.
  Graph g;
  Value x = input(g, "x", {DType::f32, {4, 8, 16}});
  Value gamma = input(g, "gamma", {DType::f32, {16}});
  Value beta = input(g, "beta", {DType::f32, {16}});
  {
    ScopeGuard in_block(g, "blocks.3");
    ScopeGuard in_attn(g, "attn");
    g.add_output("loss", sum(softmax(layernorm(x, gamma, beta), -1) * x).id);
  }
  Graph opt = optimized(g, AutodiffOptions{{"gamma"}, 0});
  FusionPlan plan = fuse(opt);
  std::set<std::string> names;
  for (const Kernel& k : plan.kernels) {
    std::string symbol = kernel_symbol(plan, k, kernel_key(plan, k, "test"));
    INFO(symbol);
    CHECK(symbol.starts_with("sinter_"));
    CHECK(symbol.find_first_not_of(
              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") ==
          std::string::npos);
    names.insert(symbol.substr(0, symbol.size() - 33)); // without _<32 hex>
  }
  INFO(plan.print());
  auto has = [&](const std::string& part) {
    return std::any_of(names.begin(), names.end(),
                       [&](const std::string& n) { return n.find(part) != std::string::npos; });
  };
  CHECK(has("sinter_blocks_N_attn_softmax_"));
  CHECK(has("sinter_blocks_N_attn_layernorm_"));
  CHECK(has("_bwd_"));
  CHECK(has("_reduce_reduce_sum"));

  // The name travels with the cached binary: a process loading it uses the stored symbol.
  auto payload = named_payload("sinter_a_b", std::vector<char>{'x', '\0', 'y'});
  auto back = split_named_payload(payload);
  REQUIRE(back);
  CHECK(back->first == "sinter_a_b");
  CHECK(back->second == std::vector<char>{'x', '\0', 'y'});
  CHECK_FALSE(split_named_payload(std::vector<char>{'x', 'y'}));
}

TEST_CASE("a new process finds compiled kernels in the disk cache", "[cpu][cache]") {
  TestBackend backend("sinter-cache");
  Graph g = mlp_step_graph(4, 16);
  auto inputs = random_inputs(g, 1);
  CpuExecutable first(g, *backend.library, backend.pool);
  CHECK(first.report().compiled > 0);
  CHECK(first.report().from_disk == 0);
  auto expected = first.run(inputs);

  CpuExecutable again(g, *backend.library, backend.pool);
  CHECK(again.report().compiled == 0);
  CHECK(again.report().from_memory == first.report().generated);
  CHECK(first.report().compiled < first.report().generated); // identical kernels compile once

  backend.restart();
  CpuExecutable restarted(g, *backend.library, backend.pool);
  CHECK(restarted.report().compiled == 0);
  CHECK(restarted.report().from_disk == first.report().compiled);
  auto got = restarted.run(inputs);
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK(got[i].to_doubles() == expected[i].to_doubles());
}

TEST_CASE("a corrupt cache entry is reported, never executed, and recompiled", "[cpu][cache]") {
  TestBackend backend("sinter-corrupt");
  Graph g = mlp_step_graph(4, 16);
  CpuExecutable first(g, *backend.library, backend.pool);
  std::size_t entries = 0;
  for (const auto& file : std::filesystem::directory_iterator(backend.dir)) {
    if (file.path().extension() != ".sko") continue;
    ++entries;
    auto size = std::filesystem::file_size(file.path());
    std::filesystem::resize_file(file.path(), size / 2); // truncated, as by a crash mid-write
  }
  REQUIRE(entries == first.report().compiled);
  backend.restart();
  CpuExecutable second(g, *backend.library, backend.pool);
  CHECK(second.report().from_disk == 0);
  CHECK(second.report().compiled == entries);
  auto inputs = random_inputs(g, 2);
  CHECK(second.run(inputs)[0].to_doubles() == first.run(inputs)[0].to_doubles());
}

TEST_CASE("two processes compiling the same kernels at once both succeed", "[cpu][cache]") {
  TestBackend backend("sinter-race");
  Graph g = mlp_step_graph(4, 16);
  pid_t children[2];
  for (pid_t& child : children) {
    child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      int status = 0;
      try {
        KernelCache cache(backend.dir);
        KernelLibrary library(cache);
        ThreadPool pool(1);
        CpuExecutable exe(g, library, pool);
        exe.run(random_inputs(g, 1));
      } catch (...) {
        status = 1;
      }
      _exit(status);
    }
  }
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  backend.restart();
  CpuExecutable after(g, *backend.library, backend.pool);
  CHECK(after.report().compiled == 0);
  for (const auto& file : std::filesystem::directory_iterator(backend.dir))
    CHECK(file.path().extension() != ".tmp");
}

namespace {

/// Kernels of a plan that do more than a GEMM or attention (what fusion decides).
std::size_t generated_kernels(const FusionPlan& plan) {
  std::size_t n = 0;
  for (const Kernel& k : plan.kernels)
    n += k.kind != KernelKind::gemm && k.kind != KernelKind::attention;
  return n;
}

} // namespace

TEST_CASE("row kernels: a layernorm forward is one kernel, its backward two", "[cpu][fusion]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {32, 64}});
  Value gamma = input(g, "gamma", {DType::f32, {64}});
  Value beta = input(g, "beta", {DType::f32, {64}});
  Value y = layernorm(x, gamma, beta);
  g.add_output("y", y.id);
  Graph forward = optimized(g);
  FusionPlan plan = fuse(forward, FusionOptions{.row_kernels = true});
  INFO(plan.print());
  REQUIRE(plan.kernels.size() == 1);
  CHECK(plan.kernels[0].kind == KernelKind::row);
  CHECK(row_reductions(forward, plan.kernels[0]).size() == 2); // mean, then variance
  // Without row kernels (what the GPU asks for today): mean, centre, variance, scale, affine.
  CHECK(fuse(forward).kernels.size() > 1);

  // The gradient with respect to x: the forward kernel and at most two for the backward.
  Graph dx = build_graph({{"x", {DType::f32, {32, 64}}, {}},
                          {"gamma", {DType::f32, {64}}, {}},
                          {"beta", {DType::f32, {64}}, {}},
                          {"r", {DType::f32, {32, 64}}, {}}},
                         [](Graph&, std::vector<Value>& in) {
                           return std::vector<Value>{sum(layernorm(in[0], in[1], in[2]) * in[3])};
                         });
  Graph step = optimized(dx, AutodiffOptions{{"x"}, 0});
  FusionPlan step_plan = fuse(step, FusionOptions{.row_kernels = true});
  INFO(step_plan.print());
  std::size_t rows = 0;
  for (const Kernel& k : step_plan.kernels)
    rows += k.kind == KernelKind::row;
  CHECK(rows == 2);
  // The forward (also saving what the backward reads), the loss's sum, the backward.
  CHECK(generated_kernels(step_plan) == 3);
}

TEST_CASE("row kernels: softmax is one kernel and computes what the interpreter does",
          "[cpu][fusion]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {3, 5, 7}});
  g.add_output("p", softmax(x * 2.0, -1).id);
  g.add_output("l", log_softmax(x, -1).id);
  Graph opt = optimized(g);
  FusionPlan plan = fuse(opt, FusionOptions{.row_kernels = true});
  INFO(plan.print());
  for (const Kernel& k : plan.kernels)
    CHECK(k.kind == KernelKind::row);
  CHECK(plan.kernels.size() <= 2);
  TestBackend backend("sinter-row-kernels");
  CpuExecutable exe(opt, *backend.library, backend.pool);
  std::vector<HostTensor> inputs = random_inputs(opt, 5);
  std::vector<HostTensor> got = exe.run(inputs);
  std::vector<F64Tensor> want = interpret(opt, std::vector<F64Tensor>{to_f64(inputs[0])});
  for (std::size_t i = 0; i < 2; ++i)
    CHECK(max_relative_difference(to_f64(got[i]), want[i]) < 1e-5);
}

TEST_CASE("row kernels: a reduction read across rows stays a kernel of its own", "[cpu][fusion]") {
  // Each row is divided by the sum of the *next* row: the sum is read at another row, so
  // computing it per row inside the consumer would be wrong.
  Graph g;
  Value x = input(g, "x", {DType::f32, {4, 8}});
  Value totals = sum(x + 1.0, {-1}, true); // [4, 1], about 8
  Value shifted =
      concat(std::vector<Value>{slice(totals, {1, 0}, {4, 1}), slice(totals, {0, 0}, {1, 1})}, 0);
  g.add_output("y", (x / shifted).id);
  Graph opt = optimized(g);
  FusionPlan plan = fuse(opt, FusionOptions{.row_kernels = true});
  INFO(plan.print());
  CHECK(plan.kernels.size() == 2);
  TestBackend backend("sinter-row-kernels-across");
  CpuExecutable exe(opt, *backend.library, backend.pool);
  std::vector<HostTensor> inputs = random_inputs(opt, 9);
  std::vector<F64Tensor> want = interpret(opt, std::vector<F64Tensor>{to_f64(inputs[0])});
  CHECK(max_relative_difference(to_f64(exe.run(inputs)[0]), want[0]) < 1e-5);
}

TEST_CASE("sibling reductions: reductions over the same axes share one kernel and its pass",
          "[cpu][fusion]") {
  // Column sums as in a layernorm's γ and β gradients (dy and dy·x̂ over the rows), a column
  // max beside them, and two row sums; one more column sum reads a column sum's result, so it
  // cannot join it.
  Graph g;
  Value x = input(g, "x", {DType::f32, {6, 5, 7}});
  Value dy = input(g, "dy", {DType::f32, {6, 5, 7}});
  Value beta_grad = sum(dy, {0, 1});
  g.add_output("beta_grad", beta_grad.id);
  g.add_output("gamma_grad", sum(dy * x, {0, 1}).id);
  g.add_output("column_max", max(x * 3.0, {0, 1}).id);
  g.add_output("row_sum", sum(x, {-1}).id);
  g.add_output("row_square_sum", sum(x * x, {-1}).id);
  g.add_output("dependent", sum(dy * broadcast_to(beta_grad, {6, 5, 7}), {0, 1}).id);
  // Same operand and result shapes, different axes: two passes.
  Value square = input(g, "square", {DType::f32, {4, 4}});
  g.add_output("square_columns", sum(square, {0}).id);
  g.add_output("square_rows", sum(square * 2.0, {1}).id);
  Graph opt = optimized(g);
  FusionPlan plan = fuse(opt, FusionOptions{.sibling_reductions = true});
  INFO(plan.print());
  std::size_t outputs = 0;
  for (const Kernel& k : plan.kernels) {
    CHECK(k.kind == KernelKind::reduce);
    outputs += k.outputs().size();
  }
  CHECK(outputs == 8);
  // 3 column reductions, 2 row sums, the dependent one, the square's columns, its rows.
  CHECK(plan.kernels.size() == 5);
  CHECK(fuse(opt).kernels.size() == 8);

  TestBackend backend("sinter-sibling-reductions");
  CpuExecutable exe(opt, *backend.library, backend.pool);
  std::vector<HostTensor> inputs = random_inputs(opt, 11);
  std::vector<HostTensor> got = exe.run(inputs);
  std::vector<F64Tensor> want = interpret(
      opt, std::vector<F64Tensor>{to_f64(inputs[0]), to_f64(inputs[1]), to_f64(inputs[2])});
  REQUIRE(got.size() == 8);
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("output " << i);
    CHECK(max_relative_difference(to_f64(got[i]), want[i]) < 1e-5);
  }
}

TEST_CASE("bf16 stores round with vcvtneps2bf16 where the CPU has AVX-512 BF16", "[cpu][amp]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {256}});
  g.add_output("y", cast(x * 2.0, DType::bf16).id);
  Graph opt = optimized(g);
  FusionPlan plan = fuse(opt);
  REQUIRE(plan.kernels.size() == 1);
  auto assembly_for = [&](CpuTarget& target) {
    std::string assembly;
    target.compile(plan, plan.kernels[0], "sinter_bf16_store", &assembly);
    return assembly;
  };
  CpuTarget sapphire_rapids("sapphirerapids"), zen3("znver3");
  CHECK(sapphire_rapids.native_bf16());
  CHECK(assembly_for(sapphire_rapids).find("vcvtneps2bf16") != std::string::npos);
  // Without the instruction: rounding on the bits, and no call to a runtime library routine.
  CHECK_FALSE(zen3.native_bf16());
  std::string zen3_assembly = assembly_for(zen3);
  CHECK(zen3_assembly.find("vcvtneps2bf16") == std::string::npos);
  CHECK(zen3_assembly.find("truncsfbf2") == std::string::npos);
  // The host decides for itself (AVX-NE-CONVERT, which GCC cannot ask about, also counts).
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16")) CHECK(CpuTarget().native_bf16());
}

TEST_CASE("a 16-bit column sum accumulates in f32 and rounds once (a bias gradient under AMP)",
          "[cpu]") {
  // In bf16, 256 + 1 rounds back to 256: a sum accumulated in its own type stops there. Each
  // column's exact sum is representable, so f32 accumulation gives it exactly; column j sums
  // ((j mod 7) + 1) / 4 over the rows. 300 columns: more than one chunk of accumulators.
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (Shape shape : {Shape{4096, 8}, Shape{4, 1024, 48}, Shape{512, 300}}) {
      INFO(dtype_name(dtype) << " " << to_string(shape));
      Graph g;
      Value x = input(g, "x", {dtype, shape});
      std::vector<int64_t> axes(shape.size() - 1);
      std::iota(axes.begin(), axes.end(), int64_t{0});
      g.add_output("s", emit(OpId::reduce_sum, {x}, Attrs{.ints = axes}).id);
      Graph opt = optimized(g);
      FusionPlan plan = fuse(opt);
      INFO(plan.print());
      const int64_t columns = shape.back(), rows = numel(shape) / columns;
      std::vector<double> values(static_cast<std::size_t>(numel(shape)));
      for (std::size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<double>(static_cast<int64_t>(i) % columns % 7 + 1) / 4.0;
      TestBackend backend;
      std::vector<HostTensor> inputs{HostTensor::from_doubles(dtype, shape, values)};
      F64Tensor got = to_f64(CpuExecutable(opt, *backend.library, backend.pool).run(inputs)[0]);
      REQUIRE(got.data.size() == static_cast<std::size_t>(columns));
      for (int64_t j = 0; j < columns; ++j)
        CHECK(got.data[j] == static_cast<double>(rows * (j % 7 + 1)) / 4.0);
    }
  }
}

TEST_CASE("a pooled layer norm's variance is summed by the row kernel that writes its centred "
          "rows, on the CPU and in the GPU's plan, and the pooled result is right",
          "[cpu][fusion]") {
  // A forward-only ViT's end (a distillation teacher's): its last residual sum, widened from
  // bf16, the final layer norm, the mean over tokens. The centred rows are stored (the pooling
  // and the variance both read them, and they hold the residual sum); the variance joins their
  // row kernel as a second pass and a per-row output, where it was a kernel reading every row
  // again (a ViT-B teacher's at batch 256: 159 µs predicted on an H200).
  Graph g;
  Value x = input(g, "x", {DType::bf16, {4, 40, 96}});
  Value r = input(g, "r", {DType::bf16, {4, 40, 96}});
  Value b = input(g, "b", {DType::bf16, {96}});
  Value gamma = input(g, "gamma", {DType::f32, {96}}), beta = input(g, "beta", {DType::f32, {96}});
  Value stream = cast(x + r + b, DType::f32);
  g.add_output("pooled", mean(layernorm(stream, gamma, beta), {1}).id);
  Graph opt = optimized(g);
  FusionOptions gpu = gpu_fusion_options;
  gpu.rematerialize = false; // as where the stream's inputs die with it (the teacher's)
  for (FusionOptions options :
       {FusionOptions{.row_kernels = true, .sibling_reductions = true}, gpu}) {
    FusionPlan plan = fuse(opt, options);
    INFO(plan.print());
    std::size_t row_sums = 0, rows_with_two = 0;
    for (const Kernel& k : plan.kernels) {
      row_sums += k.kind == KernelKind::reduce && is_row_reduction(opt, k.root);
      rows_with_two += k.kind == KernelKind::row && row_reductions(opt, k).size() == 2;
    }
    CHECK(row_sums == 0);
    CHECK(rows_with_two == 1);
  }
  TestBackend backend;
  auto inputs = random_inputs(opt, 9);
  std::vector<F64Tensor> values;
  for (const HostTensor& t : inputs)
    values.push_back(to_f64(t));
  auto want = interpret(opt, values);
  auto got = CpuExecutable(opt, *backend.library, backend.pool).run(inputs);
  // The interpreter rounds each bf16 sum of the stream, the kernel adds in f32 and widens once.
  CHECK(max_relative_difference(to_f64(got[0]), want[0]) < 1e-3);
}
