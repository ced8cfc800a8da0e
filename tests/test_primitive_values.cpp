// tests/test_primitive_values.cpp — every primitive op on small inputs vs hand-written values
// The interpreter evaluates a primitive with that op's own `reference` (ops/*.cpp), so the
// generated "forward matches reference" test compares a primitive with itself. Here each
// primitive of ops/op_list.def runs through the interpreter on inputs small enough to work out by
// hand, against literals (exact values, or well-known constants to 16 digits), never a
// reference's output. A new primitive needs a PRIMITIVE_CASE here or, if elementwise,
// `known_values` in its OpDef: the last test case fails until it has one.
//
// Primitives covered here (ops/op_list.def is the authority): input, constant, iota, add, sub,
// mul, div, neg, pow, maximum, minimum, exp, log, sqrt, rsqrt, tanh, erf, abs, softplus (its
// known_values), less, less_equal,
// equal, not_equal, where, cast, stop_gradient, reduce_sum, reduce_max, reduce_min, matmul,
// reshape, permute, broadcast, slice, pad, concat, gather, scatter_add, fused_attention,
// fused_attention_lse, fused_attention_grad, all_reduce, reduce_scatter, all_gather,
// broadcast_from (in a world of one; tests/test_collectives.cpp runs them across ranks).
// Composites, not covered here: they are lowered to primitives before any backend or the
// interpreter sees them, and their forward test compares that lowering with an independent
// reference: greater, greater_equal, sigmoid, relu, gelu_tanh, gelu_erf, sum, mean, max, min,
// logsumexp, transpose, broadcast_to, softmax, log_softmax, layernorm, cross_entropy,
// cross_entropy_mean, dropout, attention.
#include "jit/interp/interpreter.hpp"
#include "ops/registry.hpp"
#include "ops/value.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

using namespace sinter;

namespace {

constexpr DType f64 = DType::f64, f32 = DType::f32, i32 = DType::i32, boolean = DType::boolean;
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();

/// Primitives with at least one PRIMITIVE_CASE (filled while the test cases register).
std::set<OpId>& covered() {
  static std::set<OpId> ops;
  return ops;
}
bool cover(OpId op) {
  covered().insert(op);
  return true;
}

/// A graph input: its type and the values fed to it (row-major).
struct Operand {
  DType dtype;
  Shape shape;
  std::vector<double> values;
};

struct Result {
  TensorType type;
  std::vector<double> values;
};

/// `op` applied by emit() to the operands as graph inputs, evaluated by the interpreter.
Result run(OpId op, const std::vector<Operand>& operands, Attrs attrs = {}) {
  Graph g;
  std::vector<Value> inputs;
  std::vector<F64Tensor> values;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    const Operand& o = operands[i];
    inputs.push_back(input(g, "x" + std::to_string(i), TensorType{o.dtype, o.shape}));
    values.push_back(F64Tensor{o.shape, o.values});
  }
  Value out = emit(g, op, inputs, std::move(attrs));
  g.add_output("out", out.id);
  F64Tensor got = interpret(g, values).at(0);
  REQUIRE(got.shape == out.shape());
  return Result{out.type(), got.data};
}

/// Exact up to a few units in the last place; NaN matches NaN, infinities match exactly.
bool same_value(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= 1e-15 * std::max(1.0, std::abs(want));
}

std::string listing(const std::vector<double>& values) {
  std::ostringstream os;
  os.precision(17);
  os << "{";
  for (std::size_t i = 0; i < values.size(); ++i)
    os << (i ? ", " : "") << values[i];
  return os.str() + "}";
}

void expect(const Result& got, DType dtype, Shape shape, const std::vector<double>& want) {
  INFO("got " << to_string(got.type) << " " << listing(got.values) << ", want "
              << to_string(TensorType{dtype, shape}) << " " << listing(want));
  CHECK(got.type == TensorType{dtype, shape});
  bool same = got.values.size() == want.size();
  for (std::size_t i = 0; same && i < want.size(); ++i)
    same = same_value(got.values[i], want[i]);
  CHECK(same);
}

} // namespace

#define SINTER_PV_CONCAT_(a, b) a##b
#define SINTER_PV_CONCAT(a, b) SINTER_PV_CONCAT_(a, b)
/// A test case of hand-written values for primitive `op`; counts `op` as covered.
#define PRIMITIVE_CASE(op, sentence)                                                               \
  [[maybe_unused]] static const bool SINTER_PV_CONCAT(covers_, __LINE__) = cover(OpId::op);        \
  TEST_CASE(sentence, "[ops][forward][primitive-values]")

// ---- sources -------------------------------------------------------------------------------

PRIMITIVE_CASE(input, "input: each graph input holds the values fed to it") {
  Graph g;
  Value x = input(g, "x", TensorType{f64, {2}});
  Value y = input(g, "y", TensorType{i32, {1, 3}});
  g.add_output("y", y.id);
  g.add_output("x", x.id);
  std::vector<F64Tensor> fed{{{2}, {1.5, -2}}, {{1, 3}, {7, 8, 9}}};
  auto out = interpret(g, fed);
  CHECK(out.at(0).shape == Shape{1, 3});
  CHECK(out.at(0).data == std::vector<double>{7, 8, 9});
  CHECK(out.at(1).shape == Shape{2});
  CHECK(out.at(1).data == std::vector<double>{1.5, -2});
}

PRIMITIVE_CASE(input, "input: a value of another shape is rejected, even with as many elements") {
  Graph g;
  Value x = input(g, "x", TensorType{f64, {1, 3}});
  g.add_output("x", x.id);
  std::vector<F64Tensor> fed{{{3, 1}, {1, 2, 3}}};
  CHECK_THROWS_AS(interpret(g, fed), std::invalid_argument);
}

PRIMITIVE_CASE(constant, "constant: every element holds the constant's value") {
  expect(run(OpId::constant, {}, Attrs{.ints = {2, 3}, .real = 1.5, .dtype = f64}), f64, {2, 3},
         {1.5, 1.5, 1.5, 1.5, 1.5, 1.5});
  expect(run(OpId::constant, {}, Attrs{.ints = {}, .real = -4, .dtype = f32}), f32, {}, {-4});
}

PRIMITIVE_CASE(constant, "constant: an integer constant truncates its value toward zero") {
  expect(run(OpId::constant, {}, Attrs{.ints = {2}, .real = 2.7, .dtype = i32}), i32, {2}, {2, 2});
  expect(run(OpId::constant, {}, Attrs{.ints = {1}, .real = -2.7, .dtype = i32}), i32, {1}, {-2});
}

PRIMITIVE_CASE(iota, "iota: each element is its index along the iota axis") {
  expect(run(OpId::iota, {}, Attrs{.ints = {2, 3}, .ints2 = {1}, .dtype = i32}), i32, {2, 3},
         {0, 1, 2, 0, 1, 2});
  expect(run(OpId::iota, {}, Attrs{.ints = {2, 3}, .ints2 = {0}, .dtype = i32}), i32, {2, 3},
         {0, 0, 0, 1, 1, 1});
  // A negative axis counts from the end.
  expect(run(OpId::iota, {}, Attrs{.ints = {2, 1, 2}, .ints2 = {-1}, .dtype = f32}), f32, {2, 1, 2},
         {0, 1, 0, 1});
}

// ---- elementwise arithmetic ----------------------------------------------------------------

PRIMITIVE_CASE(add, "add: adds elementwise, a row broadcasting over the rows") {
  expect(run(OpId::add, {{f64, {2, 3}, {1, 2, 3, 4, 5, 6}}, {f64, {3}, {10, 20, 30}}}), f64, {2, 3},
         {11, 22, 33, 14, 25, 36});
  expect(run(OpId::add, {{i32, {2}, {2, -3}}, {i32, {2}, {5, 1}}}), i32, {2}, {7, -2});
}

PRIMITIVE_CASE(sub, "sub: subtracts the second operand from the first") {
  expect(run(OpId::sub, {{f64, {2}, {5, 3}}, {f64, {2}, {2, 7}}}), f64, {2}, {3, -4});
  expect(run(OpId::sub, {{f64, {2, 2}, {1, 2, 3, 4}}, {f64, {}, {1}}}), f64, {2, 2}, {0, 1, 2, 3});
  expect(run(OpId::sub, {{f64, {}, {1}}, {f64, {2}, {0.5, 4}}}), f64, {2}, {0.5, -3});
}

PRIMITIVE_CASE(mul, "mul: multiplies elementwise, a column times a row is their outer product") {
  expect(run(OpId::mul, {{f64, {3}, {1.5, -2, 0}}, {f64, {3}, {2, 3, 4}}}), f64, {3}, {3, -6, 0});
  expect(run(OpId::mul, {{f64, {2, 1}, {1, 2}}, {f64, {1, 3}, {3, 4, 5}}}), f64, {2, 3},
         {3, 4, 5, 6, 8, 10});
}

PRIMITIVE_CASE(div, "div: divides the first operand by the second") {
  expect(run(OpId::div, {{f64, {4}, {1, -3, 1, -1}}, {f64, {4}, {4, 2, 0, 0}}}), f64, {4},
         {0.25, -1.5, inf, -inf});
  expect(run(OpId::div, {{f64, {2}, {6, 1}}, {f64, {}, {3}}}), f64, {2}, {2, 1.0 / 3.0});
}

PRIMITIVE_CASE(div, "div: integer division truncates toward zero") {
  expect(run(OpId::div, {{i32, {3}, {7, -7, 1}}, {i32, {3}, {2, 2, 3}}}), i32, {3}, {3, -3, 0});
}

PRIMITIVE_CASE(neg, "neg: flips the sign") {
  expect(run(OpId::neg, {{f64, {3}, {1.5, -2, 0}}}), f64, {3}, {-1.5, 2, 0});
  expect(run(OpId::neg, {{i32, {2}, {3, -4}}}), i32, {2}, {-3, 4});
}

PRIMITIVE_CASE(pow, "pow: raises the first operand to the power of the second") {
  expect(run(OpId::pow, {{f64, {5}, {2, 4, 2, 1.5, 9}}, {f64, {5}, {3, 0.5, -2, 2, 0}}}), f64, {5},
         {8, 2, 0.25, 2.25, 1});
}

PRIMITIVE_CASE(maximum, "maximum: the larger of the two operands") {
  expect(run(OpId::maximum, {{f64, {4}, {1, -2, 3, 0.5}}, {f64, {4}, {2, -3, 3, -0.5}}}), f64, {4},
         {2, -2, 3, 0.5});
  expect(run(OpId::maximum, {{f64, {3}, {-1, 0.5, 0}}, {f64, {}, {0}}}), f64, {3}, {0, 0.5, 0});
}

PRIMITIVE_CASE(minimum, "minimum: the smaller of the two operands") {
  expect(run(OpId::minimum, {{f64, {4}, {1, -2, 3, 0.5}}, {f64, {4}, {2, -3, 3, -0.5}}}), f64, {4},
         {1, -3, 3, -0.5});
  expect(run(OpId::minimum, {{i32, {3}, {-1, 5, 0}}, {i32, {}, {1}}}), i32, {3}, {-1, 1, 0});
}

// ---- elementwise math ----------------------------------------------------------------------

PRIMITIVE_CASE(exp, "exp: e to the power x") {
  expect(run(OpId::exp, {{f64, {5}, {0, 1, -1, 2, -inf}}}), f64, {5},
         {1, 2.718281828459045, 0.36787944117144233, 7.38905609893065, 0});
}

PRIMITIVE_CASE(log, "log: the natural logarithm, -inf at 0 and NaN below") {
  expect(run(OpId::log, {{f64, {6}, {1, 2, 10, 2.718281828459045, 0, -1}}}), f64, {6},
         {0, 0.6931471805599453, 2.302585092994046, 1, -inf, not_a_number});
}

PRIMITIVE_CASE(sqrt, "sqrt: the non-negative square root, NaN below 0") {
  expect(run(OpId::sqrt, {{f64, {5}, {4, 2, 0, 0.25, -1}}}), f64, {5},
         {2, 1.4142135623730951, 0, 0.5, not_a_number});
}

PRIMITIVE_CASE(rsqrt, "rsqrt: one over the square root, +inf at 0") {
  expect(run(OpId::rsqrt, {{f64, {4}, {4, 2, 0.25, 0}}}), f64, {4},
         {0.5, 0.7071067811865476, 2, inf});
}

PRIMITIVE_CASE(tanh, "tanh: the hyperbolic tangent, odd and saturating at 1") {
  expect(run(OpId::tanh, {{f64, {5}, {0, 1, -1, 0.5, 20}}}), f64, {5},
         {0, 0.7615941559557649, -0.7615941559557649, 0.46211715726000974, 1});
}

PRIMITIVE_CASE(erf, "erf: the Gauss error function, odd and saturating at 1") {
  expect(run(OpId::erf, {{f64, {5}, {0, 1, -0.5, 2, 10}}}), f64, {5},
         {0, 0.8427007929497149, -0.5204998778130465, 0.9953222650189527, 1});
}

PRIMITIVE_CASE(abs, "abs: the magnitude, for floats and integers") {
  expect(run(OpId::abs, {{f64, {3}, {-1.5, 0, 2.25}}}), f64, {3}, {1.5, 0, 2.25});
  expect(run(OpId::abs, {{i32, {2}, {-3, 4}}}), i32, {2}, {3, 4});
}

// ---- comparisons and selection -------------------------------------------------------------

PRIMITIVE_CASE(less, "less: true where the first operand is strictly smaller") {
  expect(run(OpId::less, {{f64, {3}, {1, 2, 3}}, {f64, {3}, {2, 2, 2}}}), boolean, {3}, {1, 0, 0});
  expect(run(OpId::less, {{f64, {3}, {1.75, 2, 2.25}}, {f64, {}, {2}}}), boolean, {3}, {1, 0, 0});
  expect(run(OpId::less, {{i32, {2, 2}, {-1, 0, 1, 2}}, {i32, {}, {1}}}), boolean, {2, 2},
         {1, 1, 0, 0});
}

PRIMITIVE_CASE(less_equal, "less_equal: true where the first operand is smaller or equal") {
  expect(run(OpId::less_equal, {{f64, {3}, {1, 2, 3}}, {f64, {3}, {2, 2, 2}}}), boolean, {3},
         {1, 1, 0});
  expect(run(OpId::less_equal, {{f64, {3}, {1.75, 2, 2.25}}, {f64, {}, {2}}}), boolean, {3},
         {1, 1, 0});
}

PRIMITIVE_CASE(equal, "equal: true where the operands are equal") {
  expect(run(OpId::equal, {{f64, {3}, {1, 2, 3}}, {f64, {3}, {2, 2, 2}}}), boolean, {3}, {0, 1, 0});
  expect(run(OpId::equal, {{f64, {3}, {1.75, 2, 2.25}}, {f64, {}, {2}}}), boolean, {3}, {0, 1, 0});
  expect(run(OpId::equal, {{i32, {2, 1}, {0, 1}}, {i32, {3}, {0, 1, 0}}}), boolean, {2, 3},
         {1, 0, 1, 0, 1, 0});
}

PRIMITIVE_CASE(not_equal, "not_equal: true where the operands differ") {
  expect(run(OpId::not_equal, {{f64, {3}, {1, 2, 3}}, {f64, {3}, {2, 2, 2}}}), boolean, {3},
         {1, 0, 1});
  expect(run(OpId::not_equal, {{f64, {3}, {1.75, 2, 2.25}}, {f64, {}, {2}}}), boolean, {3},
         {1, 0, 1});
}

PRIMITIVE_CASE(where, "where: picks the second operand where the condition holds, else the third") {
  expect(run(OpId::where,
             {{boolean, {3}, {1, 0, 1}}, {f64, {3}, {1, 2, 3}}, {f64, {3}, {10, 20, 30}}}),
         f64, {3}, {1, 20, 3});
  // A column condition, a row and a scalar broadcast to [2, 3].
  expect(run(OpId::where, {{boolean, {2, 1}, {1, 0}}, {f64, {3}, {1, 2, 3}}, {f64, {}, {-1}}}), f64,
         {2, 3}, {1, 2, 3, -1, -1, -1});
}

// ---- casts ---------------------------------------------------------------------------------

PRIMITIVE_CASE(cast, "cast: to an integer type truncates toward zero") {
  expect(run(OpId::cast, {{f64, {4}, {2.7, -2.7, 0.5, -0.5}}}, Attrs{.dtype = i32}), i32, {4},
         {2, -2, 0, 0});
}

PRIMITIVE_CASE(cast, "cast: to bool is true for every nonzero value") {
  expect(run(OpId::cast, {{f64, {4}, {0, 0.5, -3, 1}}}, Attrs{.dtype = boolean}), boolean, {4},
         {0, 1, 1, 1});
}

PRIMITIVE_CASE(cast, "cast: to f32 rounds to the nearest float") {
  expect(run(OpId::cast, {{f64, {3}, {0.1, 1.0 / 3.0, 0.5}}}, Attrs{.dtype = f32}), f32, {3},
         {0.100000001490116119384765625, 0.3333333432674407958984375, 0.5});
}

PRIMITIVE_CASE(cast, "cast: to bf16 keeps 8 significant bits, ties to even") {
  // 1 + 2^-8 and 1 + 3 * 2^-8 are halfway between bf16 neighbours: they go to the even one.
  expect(run(OpId::cast, {{f64, {4}, {3.14159, 1.00390625, 1.01171875, -2.5}}},
             Attrs{.dtype = DType::bf16}),
         DType::bf16, {4}, {3.140625, 1, 1.015625, -2.5});
}

PRIMITIVE_CASE(cast, "cast: to f16 keeps 11 significant bits, ties to even") {
  // 1 + 2^-11 and 1 + 3 * 2^-11 are halfway between f16 neighbours: they go to the even one.
  expect(run(OpId::cast, {{f64, {3}, {0.1, 1.00048828125, 1.00146484375}}},
             Attrs{.dtype = DType::f16}),
         DType::f16, {3}, {0.0999755859375, 1, 1.001953125});
}

PRIMITIVE_CASE(cast, "cast: from an integer or bool to a float keeps the value") {
  expect(run(OpId::cast, {{i32, {2}, {-3, 7}}}, Attrs{.dtype = f64}), f64, {2}, {-3, 7});
  expect(run(OpId::cast, {{boolean, {2}, {1, 0}}}, Attrs{.dtype = f32}), f32, {2}, {1, 0});
}

PRIMITIVE_CASE(stop_gradient, "stop_gradient: passes its operand's values through") {
  expect(run(OpId::stop_gradient, {{f64, {2}, {1.5, -2}}}), f64, {2}, {1.5, -2});
}

// ---- reductions ----------------------------------------------------------------------------

PRIMITIVE_CASE(reduce_sum, "reduce_sum: sums over the listed axes and drops them") {
  Operand x{f64, {2, 3}, {1, 2, 3, 4, 5, 6}};
  expect(run(OpId::reduce_sum, {x}, Attrs{.ints = {1}}), f64, {2}, {6, 15});
  expect(run(OpId::reduce_sum, {x}, Attrs{.ints = {0}}), f64, {3}, {5, 7, 9});
  expect(run(OpId::reduce_sum, {x}, Attrs{.ints = {0, 1}}), f64, {}, {21});
  // x[i, j, k] = 4i + 2j + k: over i and k, j = 0 gives 0+1+4+5 and j = 1 gives 2+3+6+7.
  expect(run(OpId::reduce_sum, {{f64, {2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}}}, Attrs{.ints = {0, 2}}),
         f64, {2}, {10, 18});
}

PRIMITIVE_CASE(reduce_max, "reduce_max: the largest element over the listed axes") {
  Operand x{f64, {2, 3}, {1, -5, 3, -4, 2, 0}};
  expect(run(OpId::reduce_max, {x}, Attrs{.ints = {1}}), f64, {2}, {3, 2});
  expect(run(OpId::reduce_max, {x}, Attrs{.ints = {0}}), f64, {3}, {1, 2, 3});
  expect(run(OpId::reduce_max, {{f64, {3}, {-3, -1, -2}}}, Attrs{.ints = {0}}), f64, {}, {-1});
}

PRIMITIVE_CASE(reduce_min, "reduce_min: the smallest element over the listed axes") {
  Operand x{f64, {2, 3}, {1, -5, 3, -4, 2, 0}};
  expect(run(OpId::reduce_min, {x}, Attrs{.ints = {1}}), f64, {2}, {-5, -4});
  expect(run(OpId::reduce_min, {x}, Attrs{.ints = {0}}), f64, {3}, {-4, -5, 0});
  expect(run(OpId::reduce_min, {{f64, {3}, {3, 1, 2}}}, Attrs{.ints = {0}}), f64, {}, {1});
  expect(run(OpId::reduce_min, {{i32, {2, 2}, {7, -9, 4, 6}}}, Attrs{.ints = {0, 1}}), i32, {},
         {-9});
}

// ---- linear algebra ------------------------------------------------------------------------

PRIMITIVE_CASE(matmul, "matmul: the matrix product over the last two dims, per batch") {
  expect(
      run(OpId::matmul, {{f64, {2, 3}, {1, 2, 3, 4, 5, 6}}, {f64, {3, 2}, {7, 8, 9, 10, 11, 12}}}),
      f64, {2, 2}, {58, 64, 139, 154});
  // Batch 0: [[1,2],[3,4]] [1,1]ᵀ; batch 1: [[0,1],[1,0]] [2,3]ᵀ.
  expect(run(OpId::matmul,
             {{f64, {2, 2, 2}, {1, 2, 3, 4, 0, 1, 1, 0}}, {f64, {2, 2, 1}, {1, 1, 2, 3}}}),
         f64, {2, 2, 1}, {3, 7, 3, 2});
}

// ---- layout --------------------------------------------------------------------------------

PRIMITIVE_CASE(reshape, "reshape: the same elements in row-major order under a new shape") {
  expect(run(OpId::reshape, {{f64, {2, 3}, {1, 2, 3, 4, 5, 6}}}, Attrs{.ints = {3, 2}}), f64,
         {3, 2}, {1, 2, 3, 4, 5, 6});
  expect(run(OpId::reshape, {{f64, {}, {7}}}, Attrs{.ints = {1, 1}}), f64, {1, 1}, {7});
}

PRIMITIVE_CASE(permute, "permute: result dim i is operand dim perm[i]") {
  expect(run(OpId::permute, {{f64, {2, 3}, {1, 2, 3, 4, 5, 6}}}, Attrs{.ints = {1, 0}}), f64,
         {3, 2}, {1, 4, 2, 5, 3, 6});
  // x[i, j, k] = 4i + 2j + k; perm {2, 0, 1}: out[a, b, c] = x[b, c, a] = 4b + 2c + a.
  expect(run(OpId::permute, {{f64, {2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}}}, Attrs{.ints = {2, 0, 1}}),
         f64, {2, 2, 2}, {0, 2, 4, 6, 1, 3, 5, 7});
  expect(run(OpId::permute, {{f64, {1, 2, 3}, {1, 2, 3, 4, 5, 6}}}, Attrs{.ints = {2, 0, 1}}), f64,
         {3, 1, 2}, {1, 4, 2, 5, 3, 6});
}

PRIMITIVE_CASE(broadcast, "broadcast: right-aligned, size-1 and missing dims repeat") {
  expect(run(OpId::broadcast, {{f64, {2, 1}, {1, 2}}}, Attrs{.ints = {2, 3}}), f64, {2, 3},
         {1, 1, 1, 2, 2, 2});
  expect(run(OpId::broadcast, {{f64, {3}, {1, 2, 3}}}, Attrs{.ints = {2, 3}}), f64, {2, 3},
         {1, 2, 3, 1, 2, 3});
  expect(run(OpId::broadcast, {{f64, {}, {7}}}, Attrs{.ints = {2, 2}}), f64, {2, 2}, {7, 7, 7, 7});
  expect(run(OpId::broadcast, {{f64, {2, 1}, {1, 2}}}, Attrs{.ints = {2, 2, 3}}), f64, {2, 2, 3},
         {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
}

PRIMITIVE_CASE(slice, "slice: the elements from the starts up to (excluding) the limits") {
  // x[i, j] = 4i + j; rows 1..2, columns 1..2.
  expect(run(OpId::slice, {{f64, {3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}},
             Attrs{.ints = {1, 1}, .ints2 = {3, 3}}),
         f64, {2, 2}, {5, 6, 9, 10});
  expect(run(OpId::slice, {{f64, {4}, {10, 20, 30, 40}}}, Attrs{.ints = {2}, .ints2 = {4}}), f64,
         {2}, {30, 40});
}

PRIMITIVE_CASE(pad, "pad: adds zeros before (low) and after (high) each dim") {
  expect(run(OpId::pad, {{f64, {2, 2}, {1, 2, 3, 4}}}, Attrs{.ints = {1, 0}, .ints2 = {0, 1}}), f64,
         {3, 3}, {0, 0, 0, 1, 2, 0, 3, 4, 0});
}

PRIMITIVE_CASE(concat, "concat: joins the operands in order along the axis") {
  expect(
      run(OpId::concat, {{f64, {1, 2}, {1, 2}}, {f64, {2, 2}, {3, 4, 5, 6}}}, Attrs{.ints = {0}}),
      f64, {3, 2}, {1, 2, 3, 4, 5, 6});
  expect(run(OpId::concat,
             {{f64, {2, 1}, {1, 2}}, {f64, {2, 2}, {3, 4, 5, 6}}, {f64, {2, 1}, {7, 8}}},
             Attrs{.ints = {-1}}),
         f64, {2, 4}, {1, 3, 4, 7, 2, 5, 6, 8});
}

// ---- indexing ------------------------------------------------------------------------------

PRIMITIVE_CASE(gather, "gather: the table rows the indices name, in the indices' shape") {
  Operand table{f64, {3, 2}, {1, 2, 3, 4, 5, 6}};
  expect(run(OpId::gather, {table, {i32, {3}, {2, 0, 2}}}), f64, {3, 2}, {5, 6, 1, 2, 5, 6});
  expect(run(OpId::gather, {table, {i32, {2, 2}, {1, 0, 0, 2}}}), f64, {2, 2, 2},
         {3, 4, 1, 2, 1, 2, 5, 6});
}

PRIMITIVE_CASE(gather, "gather: an index outside the table is an error") {
  Operand table{f64, {3, 2}, {1, 2, 3, 4, 5, 6}};
  CHECK_THROWS_AS(run(OpId::gather, {table, {i32, {1}, {3}}}), std::out_of_range);
  CHECK_THROWS_AS(run(OpId::gather, {table, {i32, {1}, {-1}}}), std::out_of_range);
}

PRIMITIVE_CASE(scatter_add, "scatter_add: sums each update row into the row its index names") {
  // Rows 0 and 2 of the updates land in row 0, row 1 in row 2; row 1 stays zero.
  expect(run(OpId::scatter_add, {{i32, {3}, {0, 2, 0}}, {f64, {3, 2}, {1, 2, 3, 4, 5, 6}}},
             Attrs{.ints = {3}}),
         f64, {3, 2}, {6, 8, 0, 0, 3, 4});
}

PRIMITIVE_CASE(scatter_add, "scatter_add: an index outside the rows is an error") {
  CHECK_THROWS_AS(
      run(OpId::scatter_add, {{i32, {1}, {3}}, {f64, {1, 2}, {1, 2}}}, Attrs{.ints = {3}}),
      std::out_of_range);
}

// ---- fused attention ----------------------------------------------------------------------

// One query [1, 0] against keys [1, 0] and [0, 1] with scale 1: scores (1, 0), weights
// (σ(1), 1 - σ(1)) = (e/(1+e), 1/(1+e)), log-sum-exp log(1 + e).
constexpr double sigmoid_1 = 0.7310585786300049;        // e / (1 + e)
constexpr double sigmoid_prime_1 = 0.19661193324148185; // σ(1)(1 - σ(1))
constexpr double log_1_plus_e = 1.3132616875182228;
const Operand attention_q{f64, {1, 2}, {1, 0}}, attention_k{f64, {2, 2}, {1, 0, 0, 1}},
    attention_v{f64, {2, 1}, {1, 0}};

PRIMITIVE_CASE(fused_attention, "fused_attention: softmax(scale · q · kᵀ) · v") {
  expect(run(OpId::fused_attention, {attention_q, attention_k, attention_v}, Attrs{.real = 1}), f64,
         {1, 1}, {sigmoid_1});
  // Causal: query 0 sees key 0 only, query 1 both (scores 0 and 1 with q = [0, 1]).
  expect(run(OpId::fused_attention,
             {{f64, {2, 2}, {1, 0, 0, 1}}, attention_k, {f64, {2, 1}, {2, 6}}},
             Attrs{.real = 1, .flag = true}),
         f64, {2, 1}, {2, 2 * (1 - sigmoid_1) + 6 * sigmoid_1});
  // A fully masked row averages v.
  expect(run(OpId::fused_attention,
             {attention_q, attention_k, {f64, {2, 1}, {2, 6}}, {boolean, {1, 2}, {0, 0}}},
             Attrs{.real = 1}),
         f64, {1, 1}, {4});
}

PRIMITIVE_CASE(all_reduce, "all_reduce: in a world of one, the sum over ranks is the operand") {
  expect(run(OpId::all_reduce, {{f64, {3}, {1, -2, 0.5}}}, Attrs{.ints = {1}}), f64, {3},
         {1, -2, 0.5});
  CHECK_THROWS_WITH(run(OpId::all_reduce, {{f64, {2}, {1, 2}}}, Attrs{.ints = {2}}),
                    Catch::Contains("built for 2 ranks"));
}

PRIMITIVE_CASE(reduce_scatter, "reduce_scatter: one rank's block of the sum is the operand") {
  expect(run(OpId::reduce_scatter, {{f64, {2, 2}, {1, 2, 3, 4}}}, Attrs{.ints = {1}}), f64, {2, 2},
         {1, 2, 3, 4});
  CHECK_THROWS_WITH(run(OpId::reduce_scatter, {{f64, {3}, {1, 2, 3}}}, Attrs{.ints = {2}}),
                    Catch::Contains("multiple of 2"));
}

PRIMITIVE_CASE(all_gather, "all_gather: one rank's operands joined is the operand") {
  expect(run(OpId::all_gather, {{f64, {2}, {7, 8}}}, Attrs{.ints = {1}}), f64, {2}, {7, 8});
}

PRIMITIVE_CASE(broadcast_from, "broadcast_from: rank 0's operand in a world of one") {
  expect(run(OpId::broadcast_from, {{f64, {2}, {5, 6}}}, Attrs{.ints = {1, 0}}), f64, {2}, {5, 6});
  CHECK_THROWS_WITH(run(OpId::broadcast_from, {{f64, {2}, {5, 6}}}, Attrs{.ints = {1, 1}}),
                    Catch::Contains("root rank"));
}

PRIMITIVE_CASE(fused_attention_lse, "fused_attention_lse: each query row's log-sum-exp") {
  expect(run(OpId::fused_attention_lse, {attention_q, attention_k, attention_v}, Attrs{.real = 1}),
         f64, {1}, {log_1_plus_e});
  // A fully masked row scores 0 for every key: log(2).
  expect(run(OpId::fused_attention_lse,
             {attention_q, attention_k, attention_v, {boolean, {1, 2}, {0, 0}}}, Attrs{.real = 1}),
         f64, {1}, {0.69314718055994531});
}

PRIMITIVE_CASE(fused_attention_grad, "fused_attention_grad: dq, dk and dv from o, lse and do") {
  // do = 1: dv = the weights; ds = p ∘ (dp - do·o) = (σ', -σ') with dp = v = (1, 0);
  // dq = ds · k, dk = dsᵀ · q.
  std::vector<Operand> operands{attention_q,
                                attention_k,
                                attention_v,
                                {f64, {1, 1}, {sigmoid_1}},
                                {f64, {1}, {log_1_plus_e}},
                                {f64, {1, 1}, {1}}};
  expect(run(OpId::fused_attention_grad, operands, Attrs{.ints = {0}, .real = 1}), f64, {1, 2},
         {sigmoid_prime_1, -sigmoid_prime_1});
  expect(run(OpId::fused_attention_grad, operands, Attrs{.ints = {1}, .real = 1}), f64, {2, 2},
         {sigmoid_prime_1, 0, -sigmoid_prime_1, 0});
  expect(run(OpId::fused_attention_grad, operands, Attrs{.ints = {2}, .real = 1}), f64, {2, 1},
         {sigmoid_1, 1 - sigmoid_1});
}

// ---- known values from the registry ------------------------------------------------------

// Elementwise primitives may carry their hand-worked values in their OpDef (`known_values`,
// ops/*.cpp), next to the rest of the op; they are checked here like a PRIMITIVE_CASE.
const bool known_values_covered = [] {
  for (std::size_t i = 0; i < num_primitives; ++i)
    if (op_def(static_cast<OpId>(i)).known_values) cover(static_cast<OpId>(i));
  return true;
}();

TEST_CASE("elementwise primitives match the values their OpDef works out by hand",
          "[ops][forward][primitive-values]") {
  std::size_t checked = 0;
  for (std::size_t i = 0; i < num_primitives; ++i) {
    OpId op = static_cast<OpId>(i);
    if (!op_def(op).known_values) continue;
    for (const KnownValue& known : op_def(op).known_values()) {
      INFO(op_name(op) << " at " << listing(known.operands));
      std::vector<Operand> operands;
      for (double x : known.operands)
        operands.push_back({f64, {1}, {x}});
      Result got = run(op, operands);
      REQUIRE(got.type == TensorType{f64, {1}});
      // Relative to the value itself: known values include tiny results (e^-50) whose every
      // digit counts.
      double want = known.result, error = std::abs(got.values[0] - want);
      INFO("got " << listing(got.values) << ", want " << listing({want}));
      CHECK((std::isnan(want) ? std::isnan(got.values[0]) : error <= 1e-15 * std::abs(want)));
      ++checked;
    }
  }
  CHECK(checked > 0);
}

// ---- completeness --------------------------------------------------------------------------

TEST_CASE("every primitive op has hand-written expected values",
          "[ops][forward][primitive-values]") {
  std::string missing;
  for (std::size_t i = 0; i < num_primitives; ++i)
    if (!covered().contains(static_cast<OpId>(i)))
      missing += " " + std::string(op_name(static_cast<OpId>(i)));
  INFO("primitives without hand-written values:"
       << missing
       << " — add a hand-written case in tests/test_primitive_values.cpp, or known_values "
          "in the op's OpDef (elementwise ops)");
  CHECK(missing.empty());
  for (OpId op : covered()) {
    INFO(op_name(op) << " is a composite: its values come from its lowering, not a PRIMITIVE_CASE");
    CHECK(is_primitive(op));
  }
}
