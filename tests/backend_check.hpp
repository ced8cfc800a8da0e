// tests/backend_check.hpp — runs a graph compiled on the CPU and on the float64 interpreter
#pragma once
#include "jit/api.hpp"
#include "jit/backend/cpu/cpu_executable.hpp"
#include "jit/passes/passes.hpp"
#include "jit/pipeline/pipeline.hpp"
#include "numeric_check.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <random>

namespace sinter::testing {

/// A private kernel cache, library and pool, so tests never touch the user's cache.
struct TestBackend {
  TempDir temp;
  std::filesystem::path dir;
  std::unique_ptr<KernelCache> cache;
  std::unique_ptr<KernelLibrary> library;
  ThreadPool pool{2};

  explicit TestBackend(const std::string& tag = "sinter-test")
      : temp(tag), dir(temp.path), cache(std::make_unique<KernelCache>(dir)),
        library(std::make_unique<KernelLibrary>(*cache)) {}

  /// A fresh library on the same directory: what a new process would see.
  void restart() { library = std::make_unique<KernelLibrary>(*cache); }
};

/// The float types every generated backend test runs each case in: a case's f64 operands
/// become each of them in turn (f32 and the AMP types, bf16 and f16).
inline constexpr DType test_precisions[] = {DType::f64, DType::f32, DType::bf16, DType::f16};

/// The values `v` holds once stored as `t` (what both sides of a comparison must see).
inline void round_all(F64Tensor& v, DType t) {
  for (double& x : v.data)
    x = round_to_dtype(x, t);
}

/// The op applied to random operands; float64 operands become `precision`.
inline Graph op_graph(OpId op, const OpTestCase& c, DType precision, std::vector<F64Tensor>& values,
                      uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<NamedOperand> operands;
  for (std::size_t i = 0; i < c.operands.size(); ++i) {
    TestOperand spec = c.operands[i];
    F64Tensor v = random_operand(spec, rng);
    if (spec.dtype == DType::f64) spec.dtype = precision;
    round_all(v, spec.dtype);
    operands.push_back({"x" + std::to_string(i), TensorType{spec.dtype, spec.shape}, v});
  }
  values = values_of(operands);
  return build_graph(operands, [&](Graph& g, std::vector<Value>& in) {
    return std::vector<Value>{emit(g, op, in, c.attrs)};
  });
}

/// loss = sum(op(x) * r), with r a fixed random input so every output element gets a
/// cotangent, differentiated with respect to every float input and optimised; nullopt when
/// the case's result is not of type `precision` or it has no float input. Appends r's value
/// to `values`.
inline std::optional<Graph> gradient_graph(OpId op, const OpTestCase& c, DType precision,
                                           std::vector<F64Tensor>& values, uint64_t seed,
                                           uint64_t cotangent_seed) {
  Graph g = op_graph(op, c, precision, values, seed);
  TensorType result = g.type(g.outputs()[0].id);
  if (result.dtype != precision) return std::nullopt;
  std::vector<std::string> wrt;
  for (const NamedValue& in : g.inputs())
    if (is_float(g.type(in.id).dtype)) wrt.push_back(in.name);
  if (wrt.empty()) return std::nullopt;
  Graph lossy;
  std::vector<Value> ins;
  for (const NamedValue& in : g.inputs())
    ins.push_back(input(lossy, in.name, g.type(in.id)));
  Value r = input(lossy, "r", result);
  lossy.add_output("loss", sum(emit(lossy, op, ins, c.attrs) * r).id);
  std::mt19937_64 rng(cotangent_seed);
  values.push_back(random_operand(TestOperand{DType::f64, result.shape}, rng));
  round_all(values.back(), precision);
  return Pipeline::standard(AutodiffOptions{wrt, 0}).run(lossy, DumpSelection(""), std::cerr);
}

/// Each output of `optimized` against the interpreter's: f32, bf16 and f16 outputs are compared
/// with the float64 result rounded to their type, by maximum relative difference.
inline void check_outputs_match(const Graph& optimized, const std::vector<HostTensor>& got,
                                const std::vector<F64Tensor>& want, double tolerance) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("output " << optimized.outputs()[i].name << " "
                   << to_string(optimized.type(optimized.outputs()[i].id)));
    F64Tensor expected = want[i];
    round_all(expected, optimized.type(optimized.outputs()[i].id).dtype);
    CHECK(max_relative_difference(to_f64(got[i]), expected) <= tolerance);
  }
}

/// Every registry test case of `op`, optimised, with its input values: forward with the f64
/// operands in each of test_precisions, the seeds fixed per op and case.
template <class Check> void for_each_forward_case(OpId op, Check check) {
  auto cases = op_def(op).test_cases();
  for (std::size_t k = 0; k < cases.size(); ++k)
    for (DType precision : test_precisions) {
      INFO(op_name(op) << " case " << k << " (" << dtype_name(precision) << ")");
      std::vector<F64Tensor> values;
      Graph g = op_graph(op, cases[k], precision, values, op_seed(op) + 5000 + k);
      check(Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr), values,
            precision);
    }
}

/// Every registry test case of `op` as a gradient graph (see gradient_graph), with its values,
/// in each of test_precisions. Fails when a precision has no case with a gradient graph, so a
/// differentiable op cannot pass by checking nothing.
template <class Check> void for_each_gradient_case(OpId op, Check check) {
  auto cases = op_def(op).test_cases();
  for (DType precision : test_precisions) {
    std::size_t checked = 0;
    for (std::size_t k = 0; k < cases.size(); ++k) {
      INFO(op_name(op) << " case " << k << " (" << dtype_name(precision) << ")");
      std::vector<F64Tensor> values;
      auto graph = gradient_graph(op, cases[k], precision, values, op_seed(op) + 7000 + k, k);
      if (!graph) continue;
      check(*graph, values, precision);
      ++checked;
    }
    INFO(op_name(op) << ": no test case yields a " << dtype_name(precision) << " gradient graph");
    CHECK(checked > 0);
  }
}

/// Largest relative difference (to max(1, |want|)) a backend may show against the interpreter:
/// f64 and f32 differ by summation order only; bf16/f16 also by where values are rounded
/// (compiled kernels keep f32 between fused ops, the interpreter stores every value), a few
/// units of the type's precision (2^-8 for bf16, 2^-11 for f16) through a short chain of ops.
/// Measured worst cases on the CPU: bf16 0.012 forward, 0.027 gradient; f16 0.00098 forward,
/// 0.0054 gradient — the limits are about twice those.
inline double backend_tolerance(DType precision, bool gradient) {
  switch (precision) {
  case DType::f32: return gradient ? 1e-4 : 2e-5;
  case DType::bf16: return gradient ? 5e-2 : 2e-2;
  case DType::f16: return gradient ? 1e-2 : 2.5e-3;
  default: return gradient ? 1e-10 : 1e-12;
  }
}

/// Uniform values in [-1, 1) for every input of `g`, from `seed`, each rounded to its input's
/// type: the backend is handed them in that type, so the interpreter must see them so too (a
/// bf16 GEMM of unrounded values differed from the rounded one's by 0.026 at K = 96).
inline std::vector<F64Tensor> random_values(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<F64Tensor> values;
  for (const auto& in : g.inputs()) {
    F64Tensor t{g.type(in.id).shape, {}};
    t.data.resize(static_cast<std::size_t>(numel(t.shape)));
    for (double& v : t.data)
      v = uniform(rng);
    round_all(t, g.type(in.id).dtype);
    values.push_back(std::move(t));
  }
  return values;
}

/// A linear layer's training step under bf16 autocast: loss = Σ tanh(x·w + b) ∘ r over
/// x [4, 64, 32] (3-D activations), differentiated for w and b. Its bias gradient is the f32
/// column sum of a bf16 dY, which a GPU's weight-gradient GEMM writes as its epilogue.
inline Graph mixed_precision_linear_step() {
  Graph g;
  Value x = input(g, "x", {DType::f32, {4, 64, 32}});
  Value r = input(g, "r", {DType::f32, {4, 64, 48}});
  Value w = input(g, "w", {DType::f32, {32, 48}}), b = input(g, "b", {DType::f32, {48}});
  g.add_output("loss", sum(tanh(matmul(x, w) + b) * r).id);
  return Pipeline::standard(AutodiffOptions{{"w", "b"}, 0})
      .run(autocast(g, DType::bf16), DumpSelection(""), std::cerr);
}

/// A bf16 MLP with tanh-GELU between its two layers (autocast), its loss and its weights' and
/// biases' gradients: on a GPU, GELU's pre-activation is written beside GELU's output by the
/// first GEMM's GELU_AUX_BIAS epilogue and read back by DGELU in the backward.
inline Graph mixed_precision_gelu_mlp_step() {
  Graph g;
  Value x = input(g, "x", {DType::f32, {4, 64, 32}});
  Value r = input(g, "r", {DType::f32, {4, 64, 32}});
  Value w1 = input(g, "w1", {DType::f32, {32, 64}}), b1 = input(g, "b1", {DType::f32, {64}});
  Value w2 = input(g, "w2", {DType::f32, {64, 32}}), b2 = input(g, "b2", {DType::f32, {32}});
  g.add_output("loss", sum(tanh(matmul(gelu_tanh(matmul(x, w1) + b1), w2) + b2) * r).id);
  return Pipeline::standard(AutodiffOptions{{"w1", "b1", "w2", "b2"}, 0})
      .run(autocast(g, DType::bf16), DumpSelection(""), std::cerr);
}

/// A language model's bf16 head with its bias and the mean cross entropy over [batch, tokens],
/// differentiated for x, w and b: with more than 2048 classes its rows take a block each on a
/// GPU, and the bias rides on the head's GEMM as its epilogue.
inline Graph lm_head_gradients(int64_t batch, int64_t tokens, int64_t width, int64_t classes) {
  Graph g;
  Value x = input(g, "x", {DType::bf16, {batch, tokens, width}});
  Value w = input(g, "w", {DType::bf16, {width, classes}});
  Value b = input(g, "b", {DType::bf16, {classes}});
  Value labels = input(g, "labels", {DType::i32, {batch, tokens}});
  g.add_output("loss", cross_entropy_mean(matmul(x, w) + b, labels).id);
  return Pipeline::standard(AutodiffOptions{{"x", "w", "b"}, 0})
      .run(g, DumpSelection(""), std::cerr);
}

inline std::vector<HostTensor> as_host(const Graph& g, const std::vector<F64Tensor>& values) {
  std::vector<HostTensor> out;
  for (std::size_t i = 0; i < values.size(); ++i)
    out.push_back(from_f64(values[i], g.type(g.inputs()[i].id).dtype));
  return out;
}

} // namespace sinter::testing
