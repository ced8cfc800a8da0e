// ops/math.cpp — exp, log, sqrt, rsqrt, tanh, erf, abs, softplus and the activations sigmoid,
// relu, gelu
#include "ops/reference.hpp"
#include "ops/test_cases.hpp"
#include "ops/type_rules.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace sinter::op_defs {
namespace {

using Args = std::span<const F64Tensor>;

template <double (*F)(double)>
F64Tensor unary_reference(Args in, const Attrs&, const TensorType& result) {
  return reference::map(in, result.shape, [](const std::vector<double>& v) { return F(v[0]); });
}

std::vector<OpTestCase> any_cases() { return test_cases::unary(); }
std::vector<OpTestCase> positive_cases() { return test_cases::unary(0.2, 3.0); }
// Kinked functions are tested away from the kink so finite differences stay valid.
std::vector<OpTestCase> away_from_zero_cases() { return test_cases::unary(-2, 2, 0.1); }

constexpr double sqrt_2_over_pi = 0.7978845608028654;
constexpr double gelu_cubic = 0.044715;

} // namespace

const OpDef exp_op{
    .arity = 1,
    .foldable = true,
    .infer = type_rules::float_same_as_operands,
    .grad = [](const GradArgs& g) { return std::vector<Value>{g.cotangent * g.result}; },
    .reference = unary_reference<[](double x) { return std::exp(x); }>,
    .test_cases = any_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef log_op{
    .arity = 1,
    .foldable = true,
    .infer = type_rules::float_same_as_operands,
    .grad = [](const GradArgs& g) { return std::vector<Value>{g.cotangent / g.operands[0]}; },
    .reference = unary_reference<[](double x) { return std::log(x); }>,
    .test_cases = positive_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef sqrt_op{
    .arity = 1,
    .foldable = true,
    .infer = type_rules::float_same_as_operands,
    .grad = [](const GradArgs& g) { return std::vector<Value>{g.cotangent * 0.5 / g.result}; },
    .reference = unary_reference<[](double x) { return std::sqrt(x); }>,
    .test_cases = positive_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef rsqrt_op{
    .arity = 1,
    .foldable = true,
    .infer = type_rules::float_same_as_operands,
    .grad =
        [](const GradArgs& g) {
          return std::vector<Value>{g.cotangent * -0.5 * g.result / g.operands[0]};
        },
    .reference = unary_reference<[](double x) { return 1.0 / std::sqrt(x); }>,
    .test_cases = positive_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef tanh_op{
    .arity = 1,
    .foldable = true,
    .infer = type_rules::float_same_as_operands,
    .grad =
        [](const GradArgs& g) {
          return std::vector<Value>{g.cotangent * (1.0 - g.result * g.result)};
        },
    .reference = unary_reference<[](double x) { return std::tanh(x); }>,
    .test_cases = any_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef erf_op{
    .arity = 1,
    .foldable = true,
    .infer = type_rules::float_same_as_operands,
    .grad =
        [](const GradArgs& g) {
          Value x = g.operands[0];
          return std::vector<Value>{g.cotangent * (2.0 / std::sqrt(std::numbers::pi)) *
                                    exp(-(x * x))};
        },
    .reference = unary_reference<[](double x) { return std::erf(x); }>,
    .test_cases = any_cases,
    .row_wise = row_rules::elementwise,
};

const OpDef abs_op{
    .arity = 1,
    .foldable = true,
    .fusion = FusionCost::cheap,
    .infer = type_rules::same_as_operands,
    .grad =
        [](const GradArgs& g) {
          Value negative = less(g.operands[0], scalar_like(g.operands[0], 0.0));
          return std::vector<Value>{where(negative, -g.cotangent, g.cotangent)};
        },
    .reference = unary_reference<[](double x) { return std::abs(x); }>,
    .test_cases = away_from_zero_cases,
    .row_wise = row_rules::elementwise,
};

/// softplus(x) = log(1 + e^x), computed as max(x, 0) + log1p(e^-|x|): no overflow for large x,
/// no loss of the tiny e^x for very negative x. Its derivative is sigmoid(x).
const OpDef softplus_op{
    .arity = 1,
    .foldable = true,
    .infer = type_rules::float_same_as_operands,
    .grad =
        [](const GradArgs& g) { return std::vector<Value>{g.cotangent * sigmoid(g.operands[0])}; },
    .reference = unary_reference<[](double x) {
      return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
    }>,
    // Wide enough that e^x would overflow f32 at the ends.
    .test_cases =
        [] {
          auto cases = test_cases::unary();
          for (OpTestCase c : test_cases::unary(-100, 100))
            cases.push_back(c);
          return cases;
        },
    // ln 2; ln(1 + e) and ln(1 + 1/e) = ln(1 + e) - 1; 50 + ln(1 + e^-50) rounds to 50;
    // ln(1 + e^-50) = e^-50 - e^-100/2 + ... rounds to e^-50.
    .known_values =
        [] {
          return std::vector<KnownValue>{{{0.0}, 0.6931471805599453},
                                         {{1.0}, 1.3132616875182228},
                                         {{-1.0}, 0.31326168751822286},
                                         {{50.0}, 50.0},
                                         {{-50.0}, 1.9287498479639178e-22}};
        },
    .row_wise = row_rules::elementwise,
};

const OpDef sigmoid_op{
    .arity = 1,
    .infer = type_rules::float_same_as_operands,
    .grad =
        [](const GradArgs& g) {
          return std::vector<Value>{g.cotangent * g.result * (1.0 - g.result)};
        },
    .lower = [](std::span<const Value> in, const Attrs&) { return 1.0 / (1.0 + exp(-in[0])); },
    .reference = unary_reference<[](double x) { return 1.0 / (1.0 + std::exp(-x)); }>,
    .test_cases = any_cases,
};

const OpDef relu_op{
    .arity = 1,
    .infer = type_rules::same_as_operands,
    .grad =
        [](const GradArgs& g) {
          Value positive = less(scalar_like(g.operands[0], 0.0), g.operands[0]);
          return std::vector<Value>{where(positive, g.cotangent, scalar_like(g.cotangent, 0.0))};
        },
    .lower = [](std::span<const Value> in,
                const Attrs&) { return maximum(in[0], scalar_like(in[0], 0.0)); },
    .reference = unary_reference<[](double x) { return (x > 0 ? x : 0.0); }>,
    .test_cases = away_from_zero_cases,
};

// GELU, tanh approximation (GPT-2, BERT): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
const OpDef gelu_tanh_op{
    .arity = 1,
    .infer = type_rules::float_same_as_operands,
    .lower =
        [](std::span<const Value> in, const Attrs&) {
          Value x = in[0];
          return 0.5 * x * (1.0 + tanh(sqrt_2_over_pi * (x + gelu_cubic * x * x * x)));
        },
    .reference = unary_reference<[](double x) {
      return 0.5 * x * (1.0 + std::tanh(sqrt_2_over_pi * (x + gelu_cubic * x * x * x)));
    }>,
    .test_cases = any_cases,
};

// GELU, exact form: x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))).
const OpDef gelu_erf_op{
    .arity = 1,
    .infer = type_rules::float_same_as_operands,
    .lower =
        [](std::span<const Value> in, const Attrs&) {
          Value x = in[0];
          return 0.5 * x * (1.0 + erf(x * (1.0 / std::numbers::sqrt2)));
        },
    .reference = unary_reference<[](double x) {
      return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
    }>,
    .test_cases = any_cases,
};

} // namespace sinter::op_defs
