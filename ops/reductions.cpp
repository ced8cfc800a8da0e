// ops/reductions.cpp — reduce_sum, reduce_max, reduce_min (primitives) and sum, mean, max, min,
// logsumexp
// Primitive attrs: ints = normalised sorted axes, reduced axes dropped from the result.
// Composite attrs: ints = axes (negative allowed, empty = all), flag = keepdims.
#include "ops/reference.hpp"
#include "ops/type_rules.hpp"

#include <cmath>
#include <limits>

namespace sinter::op_defs {
namespace {

using Args = std::span<const F64Tensor>;

TensorType reduce_type(std::span<const TensorType> in, const Attrs& a) {
  type_rules::require_numeric(in[0]);
  auto axes = type_rules::axes(a.ints, in[0].shape.size());
  return TensorType{in[0].dtype, type_rules::reduced_shape(in[0].shape, axes, a.flag)};
}

TensorType primitive_reduce_type(std::span<const TensorType> in, const Attrs& a) {
  if (a.ints.empty() && !in[0].shape.empty())
    type_rules::fail("primitive reductions need explicit axes");
  auto axes = type_rules::axes(a.ints, in[0].shape.size());
  if (axes != a.ints) type_rules::fail("primitive reduction axes must be sorted and non-negative");
  if (a.flag) type_rules::fail("primitive reductions do not keep dims");
  return reduce_type(in, a);
}

/// `r` (x reduced over `axes`, dims dropped) brought back to x's shape.
Value expand_reduced(Value r, Value x, const std::vector<int64_t>& axes) {
  Shape kept = type_rules::reduced_shape(x.shape(), axes, true);
  return emit(OpId::broadcast, {reshape(r, kept)}, Attrs{.ints = x.shape()});
}

std::vector<int64_t> normalized_axes(Value x, const Attrs& a) {
  return type_rules::axes(a.ints, x.shape().size());
}

Value reduce_keeping(OpId prim, Value x, const Attrs& a) {
  auto axes = normalized_axes(x, a);
  Value r = emit(prim, {x}, Attrs{.ints = axes});
  return a.flag ? reshape(r, type_rules::reduced_shape(x.shape(), axes, true)) : r;
}

F64Tensor sum_reference(Args in, const Attrs& a, const TensorType&) {
  auto axes = type_rules::axes(a.ints, in[0].shape.size());
  return reference::reduce(in[0], axes, a.flag, 0.0, [](double s, double v) { return s + v; });
}

F64Tensor max_reference(Args in, const Attrs& a, const TensorType&) {
  auto axes = type_rules::axes(a.ints, in[0].shape.size());
  return reference::reduce(in[0], axes, a.flag, -std::numeric_limits<double>::infinity(),
                           [](double m, double v) { return std::max(m, v); });
}

F64Tensor min_reference(Args in, const Attrs& a, const TensorType&) {
  auto axes = type_rules::axes(a.ints, in[0].shape.size());
  return reference::reduce(in[0], axes, a.flag, std::numeric_limits<double>::infinity(),
                           [](double m, double v) { return std::min(m, v); });
}

// The i32 case checks the integer identities and combines (the lowest and highest integers
// stand for max's and min's infinities).
std::vector<OpTestCase> primitive_cases() {
  return {{{TestOperand{DType::f64, {3, 4, 5}}}, Attrs{.ints = {1}}},
          {{TestOperand{DType::f64, {3, 4, 5}}}, Attrs{.ints = {0, 2}}},
          {{TestOperand{DType::f64, {6}}}, Attrs{.ints = {0}}},
          {{TestOperand{DType::i32, {4, 6}, -50, 50}}, Attrs{.ints = {1}}}};
}

std::vector<OpTestCase> composite_cases() {
  return {{{TestOperand{DType::f64, {3, 4, 5}}}, Attrs{}},
          {{TestOperand{DType::f64, {3, 4, 5}}}, Attrs{.ints = {1}}},
          {{TestOperand{DType::f64, {3, 4, 5}}}, Attrs{.ints = {-1}, .flag = true}},
          {{TestOperand{DType::f64, {3, 4, 5}}}, Attrs{.ints = {0, 2}, .flag = true}}};
}

/// OpDef::row_wise of the primitive reductions: dim 0 is not among the reduced axes.
bool reduces_other_axes(std::span<const TensorType> in, std::span<const bool> taken, const Attrs& a,
                        const TensorType& result, int64_t) {
  return row_rules::keeps_dim0(in, taken, result) && (a.ints.empty() || a.ints[0] != 0);
}

/// Gradient of reduce_max and reduce_min: the cotangent goes to the elements equal to the
/// result, and ties share it equally, so it is the same whichever extreme is picked.
std::vector<Value> grad_to_extremes(const GradArgs& g) {
  Value x = g.operands[0];
  Value is_extreme = cast(equal(x, expand_reduced(g.result, x, g.attrs.ints)), x.dtype());
  Value count = emit(OpId::reduce_sum, {is_extreme}, Attrs{.ints = g.attrs.ints});
  return {is_extreme * expand_reduced(g.cotangent / count, x, g.attrs.ints)};
}

constexpr double infinity = std::numeric_limits<double>::infinity();

} // namespace

const OpDef reduce_sum_op{
    .arity = 1,
    .precision = Precision::fp32,
    .kernel_kind = KernelKind::reduce,
    .reducer = Reducer{.combine = Reducer::Combine::add, .identity = 0.0},
    .infer = primitive_reduce_type,
    .grad =
        [](const GradArgs& g) {
          return std::vector<Value>{expand_reduced(g.cotangent, g.operands[0], g.attrs.ints)};
        },
    .reference = sum_reference,
    .test_cases = primitive_cases,
    .row_wise = reduces_other_axes,
};

const OpDef reduce_max_op{
    .arity = 1,
    .kernel_kind = KernelKind::reduce,
    .reducer = Reducer{.combine = Reducer::Combine::max, .identity = -infinity},
    .infer = primitive_reduce_type,
    .grad = grad_to_extremes,
    .reference = max_reference,
    .test_cases = primitive_cases,
    .row_wise = reduces_other_axes,
};

const OpDef reduce_min_op{
    .arity = 1,
    .kernel_kind = KernelKind::reduce,
    .reducer = Reducer{.combine = Reducer::Combine::min, .identity = infinity},
    .infer = primitive_reduce_type,
    .grad = grad_to_extremes,
    .reference = min_reference,
    .test_cases = primitive_cases,
    .row_wise = reduces_other_axes,
};

const OpDef sum_op{
    .arity = 1,
    .precision = Precision::fp32,
    .infer = reduce_type,
    .lower = [](std::span<const Value> in,
                const Attrs& a) { return reduce_keeping(OpId::reduce_sum, in[0], a); },
    .reference = sum_reference,
    .test_cases = composite_cases,
};

const OpDef mean_op{
    .arity = 1,
    .precision = Precision::fp32,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          type_rules::require_float(in[0]);
          return reduce_type(in, a);
        },
    .lower =
        [](std::span<const Value> in, const Attrs& a) {
          int64_t count = 1;
          for (int64_t axis : normalized_axes(in[0], a))
            count *= in[0].shape()[axis];
          return reduce_keeping(OpId::reduce_sum, in[0], a) / static_cast<double>(count);
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType& result) {
          F64Tensor s = sum_reference(in, a, result);
          double count =
              static_cast<double>(numel(in[0].shape)) / std::max<int64_t>(1, numel(s.shape));
          for (double& v : s.data)
            v /= count;
          return s;
        },
    .test_cases = composite_cases,
};

const OpDef max_op{
    .arity = 1,
    .infer = reduce_type,
    .lower = [](std::span<const Value> in,
                const Attrs& a) { return reduce_keeping(OpId::reduce_max, in[0], a); },
    .reference = max_reference,
    .test_cases = composite_cases,
};

const OpDef min_op{
    .arity = 1,
    .infer = reduce_type,
    .lower = [](std::span<const Value> in,
                const Attrs& a) { return reduce_keeping(OpId::reduce_min, in[0], a); },
    .reference = min_reference,
    .test_cases = composite_cases,
};

// log(sum(exp(x))), computed as m + log(sum(exp(x - m))) with m the max, so it never overflows.
const OpDef logsumexp_op{
    .arity = 1,
    .precision = Precision::fp32,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          type_rules::require_float(in[0]);
          return reduce_type(in, a);
        },
    .grad =
        [](const GradArgs& g) {
          Value x = g.operands[0];
          auto axes = normalized_axes(x, g.attrs);
          return std::vector<Value>{expand_reduced(g.cotangent, x, axes) *
                                    exp(x - expand_reduced(g.result, x, axes))};
        },
    .lower =
        [](std::span<const Value> in, const Attrs& a) {
          Value x = in[0];
          auto axes = normalized_axes(x, a);
          Value m = stop_gradient(emit(OpId::reduce_max, {x}, Attrs{.ints = axes}));
          Value shifted = exp(x - expand_reduced(m, x, axes));
          Value r = m + log(emit(OpId::reduce_sum, {shifted}, Attrs{.ints = axes}));
          return a.flag ? reshape(r, type_rules::reduced_shape(x.shape(), axes, true)) : r;
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType&) {
          auto axes = type_rules::axes(a.ints, in[0].shape.size());
          F64Tensor e = in[0];
          for (double& v : e.data)
            v = std::exp(v);
          F64Tensor s =
              reference::reduce(e, axes, a.flag, 0.0, [](double acc, double v) { return acc + v; });
          for (double& v : s.data)
            v = std::log(v);
          return s;
        },
    .test_cases = composite_cases,
};

} // namespace sinter::op_defs
