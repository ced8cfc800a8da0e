// ops/arithmetic.cpp — add, sub, mul, div, neg, pow, maximum, minimum, comparisons, where, cast,
// stop_gradient: elementwise ops over numpy-broadcast operands
#include "ops/reference.hpp"
#include "ops/test_cases.hpp"
#include "ops/type_rules.hpp"

#include <algorithm>
#include <cmath>

namespace sinter::op_defs {
namespace {

using Args = std::span<const F64Tensor>;
using Scalars = const std::vector<double>&;

template <double (*F)(Scalars)>
F64Tensor elementwise_reference(Args in, const Attrs&, const TensorType& result) {
  return reference::map(in, result.shape, F);
}

std::vector<OpTestCase> binary_cases() { return test_cases::binary(); }
std::vector<OpTestCase> positive_binary_cases() {
  return test_cases::binary({DType::f64, {}, 0.3, 2.0}, {DType::f64, {}, -1.5, 1.5});
}
std::vector<OpTestCase> divisor_cases() {
  return test_cases::binary({}, {DType::f64, {}, -2.0, 2.0, 0.3});
}
std::vector<OpTestCase> comparison_cases() {
  TestOperand whole{DType::f64, {}, -2, 3, 0, true};
  return test_cases::binary(whole, whole);
}

} // namespace

const OpDef add_op{
    .arity = 2,
    .elementwise = true,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = type_rules::same_as_operands,
    .grad = [](const GradArgs& g) { return std::vector<Value>{g.cotangent, g.cotangent}; },
    .reference = elementwise_reference<[](Scalars v) { return v[0] + v[1]; }>,
    .test_cases = binary_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef sub_op{
    .arity = 2,
    .elementwise = true,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = type_rules::same_as_operands,
    .grad = [](const GradArgs& g) { return std::vector<Value>{g.cotangent, -g.cotangent}; },
    .reference = elementwise_reference<[](Scalars v) { return v[0] - v[1]; }>,
    .test_cases = binary_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef mul_op{
    .arity = 2,
    .elementwise = true,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = type_rules::same_as_operands,
    .grad =
        [](const GradArgs& g) {
          return std::vector<Value>{g.cotangent * g.operands[1], g.cotangent * g.operands[0]};
        },
    .reference = elementwise_reference<[](Scalars v) { return v[0] * v[1]; }>,
    .test_cases = binary_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef div_op{
    .arity = 2,
    .elementwise = true,
    .foldable = true,
    .infer = type_rules::same_as_operands,
    .grad =
        [](const GradArgs& g) {
          Value b = g.operands[1];
          return std::vector<Value>{g.cotangent / b, -(g.cotangent * g.result) / b};
        },
    .reference = elementwise_reference<[](Scalars v) { return v[0] / v[1]; }>,
    .test_cases = divisor_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef neg_op{
    .arity = 1,
    .elementwise = true,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = type_rules::same_as_operands,
    .grad = [](const GradArgs& g) { return std::vector<Value>{-g.cotangent}; },
    .reference = elementwise_reference<[](Scalars v) { return -v[0]; }>,
    .test_cases = [] { return test_cases::unary(); },
    .row_wise = row_rules::elementwise,
};

const OpDef pow_op{
    .arity = 2,
    .elementwise = true,
    .foldable = true,
    .infer = type_rules::float_same_as_operands,
    .grad =
        [](const GradArgs& g) {
          Value a = g.operands[0], b = g.operands[1];
          return std::vector<Value>{g.cotangent * b * pow(a, b - 1.0),
                                    g.cotangent * g.result * log(a)};
        },
    .reference = elementwise_reference<[](Scalars v) { return std::pow(v[0], v[1]); }>,
    .test_cases = positive_binary_cases,
    .row_wise = row_rules::elementwise,
};

// Ties send the whole cotangent to the first operand (maximum) or the first (minimum).
const OpDef maximum_op{
    .arity = 2,
    .elementwise = true,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = type_rules::same_as_operands,
    .grad =
        [](const GradArgs& g) {
          Value second_wins = less(g.operands[0], g.operands[1]);
          Value zero = scalar_like(g.cotangent, 0.0);
          return std::vector<Value>{where(second_wins, zero, g.cotangent),
                                    where(second_wins, g.cotangent, zero)};
        },
    .reference = elementwise_reference<[](Scalars v) { return std::max(v[0], v[1]); }>,
    .test_cases = binary_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef minimum_op{
    .arity = 2,
    .elementwise = true,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = type_rules::same_as_operands,
    .grad =
        [](const GradArgs& g) {
          Value first_wins = less_equal(g.operands[0], g.operands[1]);
          Value zero = scalar_like(g.cotangent, 0.0);
          return std::vector<Value>{where(first_wins, g.cotangent, zero),
                                    where(first_wins, zero, g.cotangent)};
        },
    .reference = elementwise_reference<[](Scalars v) { return std::min(v[0], v[1]); }>,
    .test_cases = binary_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef less_op{
    .arity = 2,
    .elementwise = true,
    .differentiable = false,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = type_rules::comparison,
    .reference = elementwise_reference<[](Scalars v) { return double(v[0] < v[1]); }>,
    .test_cases = comparison_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef less_equal_op{
    .arity = 2,
    .elementwise = true,
    .differentiable = false,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = type_rules::comparison,
    .reference = elementwise_reference<[](Scalars v) { return double(v[0] <= v[1]); }>,
    .test_cases = comparison_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef equal_op{
    .arity = 2,
    .elementwise = true,
    .differentiable = false,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = type_rules::comparison,
    .reference = elementwise_reference<[](Scalars v) { return double(v[0] == v[1]); }>,
    .test_cases = comparison_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef not_equal_op{
    .arity = 2,
    .elementwise = true,
    .differentiable = false,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = type_rules::comparison,
    .reference = elementwise_reference<[](Scalars v) { return double(v[0] != v[1]); }>,
    .test_cases = comparison_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef greater_op{
    .arity = 2,
    .elementwise = true,
    .differentiable = false,
    .infer = type_rules::comparison,
    .lower = [](std::span<const Value> in, const Attrs&) { return less(in[1], in[0]); },
    .reference = elementwise_reference<[](Scalars v) { return double(v[0] > v[1]); }>,
    .test_cases = comparison_cases,
};

const OpDef greater_equal_op{
    .arity = 2,
    .elementwise = true,
    .differentiable = false,
    .infer = type_rules::comparison,
    .lower = [](std::span<const Value> in, const Attrs&) { return less_equal(in[1], in[0]); },
    .reference = elementwise_reference<[](Scalars v) { return double(v[0] >= v[1]); }>,
    .test_cases = comparison_cases,
};

const OpDef where_op{
    .arity = 3,
    .elementwise = true,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer =
        [](std::span<const TensorType> in, const Attrs&) {
          if (in[0].dtype != DType::boolean)
            type_rules::fail("condition must be bool, got " + std::string(dtype_name(in[0].dtype)) +
                             " — compare first");
          type_rules::require_same_dtype(in, 1);
          type_rules::require_same_shape(in);
          return in[1];
        },
    .grad =
        [](const GradArgs& g) {
          Value zero = scalar_like(g.cotangent, 0.0);
          return std::vector<Value>{Value{}, where(g.operands[0], g.cotangent, zero),
                                    where(g.operands[0], zero, g.cotangent)};
        },
    .reference = elementwise_reference<[](Scalars v) { return v[0] != 0 ? v[1] : v[2]; }>,
    .test_cases =
        [] {
          std::vector<OpTestCase> cases;
          for (auto [sc, sa, sb] :
               {std::tuple<Shape, Shape, Shape>{{3, 4}, {3, 4}, {3, 4}}, {{3, 1}, {4}, {}}}) {
            cases.push_back({{TestOperand{DType::boolean, sc, 0, 2}, TestOperand{DType::f64, sa},
                              TestOperand{DType::f64, sb}},
                             {}});
          }
          return cases;
        },
    .row_wise = row_rules::elementwise,
};

const OpDef cast_op{
    .arity = 1,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = [](std::span<const TensorType> in,
                const Attrs& a) { return TensorType{a.dtype, in[0].shape}; },
    .grad =
        [](const GradArgs& g) {
          Value x = g.operands[0];
          if (!is_float(x.dtype()) || !is_float(g.result.dtype()))
            return std::vector<Value>{Value{}};
          return std::vector<Value>{cast(g.cotangent, x.dtype())};
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType& result) {
          F64Tensor out = in[0];
          out.shape = result.shape;
          for (double& v : out.data)
            v = round_to_dtype(v, a.dtype);
          return out;
        },
    .test_cases =
        [] {
          std::vector<OpTestCase> cases;
          for (DType t :
               {DType::f32, DType::f64, DType::i32, DType::boolean, DType::bf16, DType::f16})
            cases.push_back({{TestOperand{DType::f64, {2, 5}, -5, 5}}, Attrs{.dtype = t}});
          cases.push_back({{TestOperand{DType::i32, {4}, -5, 5}}, Attrs{.dtype = DType::f64}});
          cases.push_back({{TestOperand{DType::f32, {2, 5}}}, Attrs{.dtype = DType::f64}});
          return cases;
        },
    .row_wise = row_rules::elementwise,
};

const OpDef stop_gradient_op{
    .arity = 1,
    .differentiable = false,
    .infer = [](std::span<const TensorType> in, const Attrs&) { return in[0]; },
    .reference = [](Args in, const Attrs&, const TensorType&) { return in[0]; },
    .test_cases = [] { return test_cases::unary(); },
    .row_wise = row_rules::elementwise,
};

} // namespace sinter::op_defs

namespace sinter {
namespace {
/// Nearest-even rounding to a binary float format with `mantissa_bits` stored bits, smallest
/// normal exponent `min_exponent` (below it: subnormal spacing) and largest finite `max_finite`
/// (beyond it: infinity).
double round_to_format(double v, int mantissa_bits, int min_exponent, double max_finite) {
  if (v == 0.0 || !std::isfinite(v)) return v;
  int e;
  std::frexp(v, &e); // |v| = m * 2^e, 0.5 <= m < 1: the leading bit is 2^(e-1)
  double ulp = std::ldexp(1.0, std::max(e - 1, min_exponent) - mantissa_bits);
  double r = std::nearbyint(v / ulp) * ulp;
  return std::abs(r) > max_finite ? std::copysign(INFINITY, v) : r;
}
} // namespace

double round_to_dtype(double v, DType t) {
  switch (t) {
  case DType::f64: return v;
  case DType::f32: return static_cast<float>(v);
  case DType::i32:
  case DType::i64: return std::trunc(v);
  case DType::boolean: return v != 0.0 ? 1.0 : 0.0;
  case DType::bf16: return round_to_format(v, 7, -126, 3.3895313892515355e38);
  case DType::f16: return round_to_format(v, 10, -14, 65504.0);
  }
  return v;
}

} // namespace sinter
