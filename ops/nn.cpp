// ops/nn.cpp — softmax, log_softmax, layernorm, softmax cross-entropy (per sample and mean)
#include "ops/reference.hpp"
#include "ops/type_rules.hpp"

#include <algorithm>
#include <cmath>

namespace sinter::op_defs {
namespace {

using Args = std::span<const F64Tensor>;
using reference::ravel;
using reference::unravel;

TensorType float_along_axis(std::span<const TensorType> in, const Attrs& a) {
  type_rules::require_float(in[0]);
  if (a.ints.size() != 1) type_rules::fail("needs exactly one axis");
  type_rules::axis(a.ints[0], in[0].shape.size());
  return in[0];
}

/// Applies f to each 1-D lane of x along `axis` (in place on a copy).
F64Tensor per_lane(const F64Tensor& x, int64_t axis,
                   const std::function<void(std::vector<double>&)>& f) {
  F64Tensor out = x;
  Shape outer = x.shape;
  int64_t n = x.shape[axis];
  outer[axis] = 1;
  for (int64_t o = 0; o < numel(outer); ++o) {
    auto idx = unravel(o, outer);
    std::vector<double> lane(n);
    for (int64_t k = 0; k < n; ++k) {
      idx[axis] = k;
      lane[k] = x.data[ravel(idx, x.shape)];
    }
    f(lane);
    for (int64_t k = 0; k < n; ++k) {
      idx[axis] = k;
      out.data[ravel(idx, x.shape)] = lane[k];
    }
  }
  return out;
}

double lane_logsumexp(const std::vector<double>& lane) {
  double m = *std::max_element(lane.begin(), lane.end());
  double s = 0;
  for (double v : lane)
    s += std::exp(v - m);
  return m + std::log(s);
}

std::vector<OpTestCase> lane_cases() {
  return {{{TestOperand{DType::f64, {3, 5}}}, Attrs{.ints = {-1}}},
          {{TestOperand{DType::f64, {2, 4, 3}}}, Attrs{.ints = {1}}}};
}

TensorType cross_entropy_type(std::span<const TensorType> in, const Attrs&) {
  type_rules::require_float(in[0], "logits");
  type_rules::require_integer(in[1], "labels");
  const Shape& logits = in[0].shape;
  if (logits.empty() || Shape(logits.begin(), logits.end() - 1) != in[1].shape)
    type_rules::fail("labels must have the logits' shape without the class dim: logits " +
                     to_string(logits) + ", labels " + to_string(in[1].shape));
  return TensorType{in[0].dtype, in[1].shape};
}

Value cross_entropy_lowering(Value logits, Value labels) {
  Shape s = logits.shape();
  Shape label_column = labels.shape();
  label_column.push_back(1);
  Value classes = iota(*logits.graph, labels.dtype(), s, -1);
  Value one_hot = cast(equal(classes, reshape(labels, label_column)), logits.dtype());
  return logsumexp(logits, {-1}) - sum(one_hot * logits, {-1});
}

F64Tensor cross_entropy_reference(Args in) {
  const F64Tensor &logits = in[0], &labels = in[1];
  int64_t classes = logits.shape.back();
  F64Tensor out{labels.shape, std::vector<double>(labels.data.size())};
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    std::vector<double> lane(logits.data.begin() + static_cast<std::ptrdiff_t>(i * classes),
                             logits.data.begin() + static_cast<std::ptrdiff_t>((i + 1) * classes));
    out.data[i] = lane_logsumexp(lane) - lane[static_cast<std::size_t>(labels.data[i])];
  }
  return out;
}

std::vector<OpTestCase> cross_entropy_cases() {
  return {{{TestOperand{DType::f64, {4, 5}}, TestOperand{DType::i32, {4}, 0, 5}}, {}},
          {{TestOperand{DType::f64, {2, 3, 4}}, TestOperand{DType::i64, {2, 3}, 0, 4}}, {}}};
}

// Counter-based uniform numbers for dropout: three rounds of the MINSTD generator
// (x <- 48271 x mod 2^31-1) over (element index, key). Every intermediate stays below 2^53, so
// the float64 interpreter and compiled integer code agree exactly.
constexpr int64_t minstd_modulus = 2147483647, minstd_multiplier = 48271;

double dropout_uniform(double index, double key) {
  auto mod = [](double v) { return v - std::trunc(v / minstd_modulus) * minstd_modulus; };
  double h = mod(index + 1 + mod(key * 7919.0));
  for (int round = 0; round < 3; ++round)
    h = mod(minstd_multiplier * mod(h + index));
  return h / minstd_modulus;
}

Value dropout_uniform(Value key, const Shape& shape) {
  Graph& g = *key.graph;
  Value index = iota(g, DType::i64, {numel(shape)}, 0);
  Value m = scalar_like(index, static_cast<double>(minstd_modulus));
  auto mod = [&](Value v) { return v - (v / m) * m; };
  Value h = mod(index + 1.0 + mod(cast(key, DType::i64) * 7919.0));
  for (int round = 0; round < 3; ++round)
    h = mod(mod(h + index) * static_cast<double>(minstd_multiplier));
  return reshape(cast(h, DType::f64) / static_cast<double>(minstd_modulus), shape);
}

} // namespace

// Operands: x (float), key (integer scalar: e.g. seed * 1000003 + step). attrs: real = p, the
// drop probability. Keeps each element with probability 1 - p, scaled by 1 / (1 - p); the same
// key always drops the same elements.
const OpDef dropout_op{
    .arity = 2,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          type_rules::require_float(in[0]);
          type_rules::require_integer(in[1], "dropout key");
          if (!in[1].shape.empty()) type_rules::fail("the dropout key must be a scalar");
          if (!(a.real >= 0.0 && a.real < 1.0))
            type_rules::fail("dropout probability must be in [0, 1)");
          return in[0];
        },
    .lower =
        [](std::span<const Value> in, const Attrs& a) {
          Value x = in[0];
          Value keep = less_equal(scalar_like(dropout_uniform(in[1], x.shape()), a.real),
                                  dropout_uniform(in[1], x.shape()));
          return where(keep, x * (1.0 / (1.0 - a.real)), scalar_like(x, 0.0));
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType&) {
          F64Tensor out = in[0];
          for (std::size_t i = 0; i < out.data.size(); ++i)
            out.data[i] = dropout_uniform(static_cast<double>(i), in[1].data[0]) >= a.real
                              ? out.data[i] / (1.0 - a.real)
                              : 0.0;
          return out;
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{TestOperand{DType::f64, {4, 8}}, TestOperand{DType::i64, {}, 0, 1000}},
               Attrs{.real = 0.3}},
              {{TestOperand{DType::f64, {16}}, TestOperand{DType::i32, {}, 0, 50}},
               Attrs{.real = 0.5}}};
        },
};

// attrs: ints = {axis}.
const OpDef softmax_op{
    .arity = 1,
    .precision = Precision::fp32,
    .infer = float_along_axis,
    .grad =
        [](const GradArgs& g) {
          Value y = g.result, dy = g.cotangent;
          return std::vector<Value>{y * (dy - sum(dy * y, g.attrs.ints, true))};
        },
    .lower =
        [](std::span<const Value> in, const Attrs& a) {
          Value x = in[0];
          Value e = exp(x - stop_gradient(max(x, a.ints, true)));
          return e / sum(e, a.ints, true);
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType&) {
          return per_lane(in[0], *normalize_axis(a.ints[0], in[0].shape.size()),
                          [](std::vector<double>& lane) {
                            double lse = lane_logsumexp(lane);
                            for (double& v : lane)
                              v = std::exp(v - lse);
                          });
        },
    .test_cases = lane_cases,
};

const OpDef log_softmax_op{
    .arity = 1,
    .precision = Precision::fp32,
    .infer = float_along_axis,
    .grad =
        [](const GradArgs& g) {
          Value dy = g.cotangent;
          return std::vector<Value>{dy - exp(g.result) * sum(dy, g.attrs.ints, true)};
        },
    .lower = [](std::span<const Value> in,
                const Attrs& a) { return in[0] - logsumexp(in[0], a.ints, true); },
    .reference =
        [](Args in, const Attrs& a, const TensorType&) {
          return per_lane(in[0], *normalize_axis(a.ints[0], in[0].shape.size()),
                          [](std::vector<double>& lane) {
                            double lse = lane_logsumexp(lane);
                            for (double& v : lane)
                              v -= lse;
                          });
        },
    .test_cases = lane_cases,
};

// Operands: x [..., D], gamma [D], beta [D]; attrs: real = epsilon. Normalises the last axis.
const OpDef layernorm_op{
    .arity = 3,
    .precision = Precision::fp32,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          type_rules::require_float(in[0]);
          type_rules::require_same_dtype(in);
          if (in[0].shape.empty()) type_rules::fail("layernorm needs rank >= 1");
          Shape feature{in[0].shape.back()};
          if (in[1].shape != feature || in[2].shape != feature)
            type_rules::fail("gamma and beta must be " + to_string(feature) + ", got " +
                             to_string(in[1].shape) + " and " + to_string(in[2].shape));
          if (!(a.real >= 0)) type_rules::fail("epsilon must be >= 0");
          return in[0];
        },
    .lower =
        [](std::span<const Value> in, const Attrs& a) {
          Value x = in[0];
          Value centered = x - mean(x, {-1}, true);
          Value variance = mean(centered * centered, {-1}, true);
          return centered * rsqrt(variance + a.real) * in[1] + in[2];
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType&) {
          F64Tensor out = per_lane(
              in[0], static_cast<int64_t>(in[0].shape.size()) - 1, [&](std::vector<double>& lane) {
                double mu = 0, var = 0;
                for (double v : lane)
                  mu += v;
                mu /= static_cast<double>(lane.size());
                for (double v : lane)
                  var += (v - mu) * (v - mu);
                var /= static_cast<double>(lane.size());
                for (std::size_t k = 0; k < lane.size(); ++k)
                  lane[k] =
                      (lane[k] - mu) / std::sqrt(var + a.real) * in[1].data[k] + in[2].data[k];
              });
          return out;
        },
    .test_cases =
        [] {
          std::vector<OpTestCase> cases;
          for (Shape s : {Shape{3, 6}, Shape{2, 2, 4}}) {
            Shape d{s.back()};
            cases.push_back({{TestOperand{DType::f64, s}, TestOperand{DType::f64, d},
                              TestOperand{DType::f64, d}},
                             Attrs{.real = 1e-5}});
          }
          return cases;
        },
};

// Operands: logits [N..., C], integer labels [N...] in [0, C). Result [N...]: -log softmax[label].
const OpDef cross_entropy_op{
    .arity = 2,
    .precision = Precision::fp32,
    .infer = cross_entropy_type,
    .lower = [](std::span<const Value> in,
                const Attrs&) { return cross_entropy_lowering(in[0], in[1]); },
    .reference = [](Args in, const Attrs&,
                    const TensorType&) { return cross_entropy_reference(in); },
    .test_cases = cross_entropy_cases,
};

const OpDef cross_entropy_mean_op{
    .arity = 2,
    .precision = Precision::fp32,
    .infer = [](std::span<const TensorType> in,
                const Attrs& a) { return TensorType{cross_entropy_type(in, a).dtype, {}}; },
    .lower = [](std::span<const Value> in,
                const Attrs&) { return mean(cross_entropy_lowering(in[0], in[1])); },
    .reference =
        [](Args in, const Attrs&, const TensorType&) {
          F64Tensor per_sample = cross_entropy_reference(in);
          double total = 0;
          for (double v : per_sample.data)
            total += v;
          return F64Tensor{{}, {total / static_cast<double>(per_sample.data.size())}};
        },
    .test_cases = cross_entropy_cases,
};

} // namespace sinter::op_defs
