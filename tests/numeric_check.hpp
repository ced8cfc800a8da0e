// tests/numeric_check.hpp — random operands, float64 evaluation and finite-difference gradients
#pragma once
#include "jit/interp/interpreter.hpp"
#include "jit/pipeline/pipeline.hpp"
#include "ops/registry.hpp"

#include <cmath>
#include <functional>
#include <iostream>
#include <random>
#include <string>

namespace sinter::testing {

/// The seed of `op`'s random test data, from its name alone (FNV-1a): adding an op to
/// ops/op_list.def renumbers the OpIds after it, and must not change other ops' test data.
inline uint64_t op_seed(OpId op) {
  uint64_t hash = 14695981039346656037ull;
  for (char c : op_name(op)) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

inline F64Tensor random_operand(const TestOperand& spec, std::mt19937_64& rng) {
  F64Tensor t{spec.shape, std::vector<double>(numel(spec.shape))};
  std::uniform_real_distribution<double> uniform(spec.lo, spec.hi);
  for (double& v : t.data) {
    if (!is_float(spec.dtype) || spec.whole_numbers) {
      v = std::floor(uniform(rng));
      continue;
    }
    do
      v = uniform(rng);
    while (std::abs(v) < spec.min_magnitude);
  }
  return t;
}

/// Builds a graph from named inputs; `body` returns the outputs.
using GraphBody = std::function<std::vector<Value>(Graph& g, std::vector<Value>& inputs)>;

struct NamedOperand {
  std::string name;
  TensorType type;
  F64Tensor value;
};

inline Graph build_graph(const std::vector<NamedOperand>& operands, const GraphBody& body) {
  Graph g;
  std::vector<Value> inputs;
  for (const NamedOperand& op : operands)
    inputs.push_back(input(g, op.name, op.type));
  std::vector<Value> outs = body(g, inputs);
  for (std::size_t i = 0; i < outs.size(); ++i)
    g.add_output("out" + std::to_string(i), outs[i].id);
  return g;
}

inline std::vector<F64Tensor> values_of(const std::vector<NamedOperand>& operands) {
  std::vector<F64Tensor> v;
  for (const NamedOperand& op : operands)
    v.push_back(op.value);
  return v;
}

/// Evaluates the (lowered, optimised) graph in float64.
inline std::vector<F64Tensor> evaluate(const Graph& g, const std::vector<F64Tensor>& inputs) {
  Graph lowered = Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr);
  return interpret(lowered, inputs);
}

struct GradientReport {
  double max_error = 0; ///< max |analytic - numeric| / max(1, |numeric|)
  std::string worst;    ///< where the worst element is, for the failure message
};

/// Compares autodiff gradients of scalar output 0 with central finite differences (float64).
inline GradientReport check_gradients(const Graph& g, std::vector<NamedOperand> operands,
                                      const std::vector<std::string>& wrt, double step = 1e-6) {
  Graph with_grads =
      Pipeline::standard(AutodiffOptions{wrt, 0}).run(g, DumpSelection(""), std::cerr);
  std::vector<F64Tensor> analytic = interpret(with_grads, values_of(operands));
  Graph forward = Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr);
  auto loss_at = [&](const std::vector<NamedOperand>& ops) {
    return interpret(forward, values_of(ops))[0].data[0];
  };
  GradientReport report;
  for (std::size_t w = 0; w < wrt.size(); ++w) {
    std::size_t k = 0;
    while (operands[k].name != wrt[w])
      ++k;
    const F64Tensor& grad = analytic[g.outputs().size() + w];
    for (std::size_t i = 0; i < operands[k].value.data.size(); ++i) {
      double x = operands[k].value.data[i];
      operands[k].value.data[i] = x + step;
      double up = loss_at(operands);
      operands[k].value.data[i] = x - step;
      double down = loss_at(operands);
      operands[k].value.data[i] = x;
      double numeric = (up - down) / (2 * step);
      double error = std::abs(grad.data[i] - numeric) / std::max(1.0, std::abs(numeric));
      // A non-finite value on either side is the worst error there is (NaN compares false).
      if (!std::isfinite(grad.data[i]) || !std::isfinite(numeric)) error = INFINITY;
      if (error > report.max_error) {
        report.max_error = error;
        report.worst = wrt[w] + "[" + std::to_string(i) + "]: autodiff " +
                       std::to_string(grad.data[i]) + " vs finite difference " +
                       std::to_string(numeric);
      }
    }
  }
  return report;
}

/// Largest |a - b| / max(1, |b|) over two tensors of equal shape; infinite if the shapes
/// differ or either side holds a non-finite value (NaN == NaN must not pass).
inline double max_relative_difference(const F64Tensor& a, const F64Tensor& b) {
  if (a.shape != b.shape || a.data.size() != b.data.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    if (!std::isfinite(a.data[i]) || !std::isfinite(b.data[i])) return INFINITY;
    worst = std::max(worst, std::abs(a.data[i] - b.data[i]) / std::max(1.0, std::abs(b.data[i])));
  }
  return worst;
}

} // namespace sinter::testing
