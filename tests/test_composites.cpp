// tests/test_composites.cpp — whole models: MLP with cross-entropy, layernorm, causal attention
#include "numeric_check.hpp"

#include <catch2/catch.hpp>

using namespace sinter;
using namespace sinter::testing;

namespace {

NamedOperand random_input(std::string name, Shape shape, std::mt19937_64& rng, double scale = 1) {
  TestOperand spec{DType::f64, shape, -scale, scale};
  return {std::move(name), TensorType{DType::f64, shape}, random_operand(spec, rng)};
}

std::vector<std::string> names_of(const std::vector<NamedOperand>& ops, std::size_t count) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < count; ++i)
    names.push_back(ops[i].name);
  return names;
}

/// Causal self-attention softmax(Q Kᵀ / √d + mask) V over [batch, seq, dim].
Value causal_attention(Graph& g, Value q, Value k, Value v) {
  Shape s = q.shape();
  int64_t seq = s[1];
  double scale = 1.0 / std::sqrt(static_cast<double>(s[2]));
  Value scores = matmul(q, transpose(k)) * scale;
  Value row = iota(g, DType::i32, {seq, seq}, 0), col = iota(g, DType::i32, {seq, seq}, 1);
  Value visible = less_equal(col, row);
  Value masked = where(visible, scores, scalar_like(scores, -1e9));
  return matmul(softmax(masked), v);
}

} // namespace

TEST_CASE("a two-layer MLP with cross-entropy has exact gradients", "[composite]") {
  std::mt19937_64 rng(1);
  std::vector<NamedOperand> ops{random_input("w1", {4, 8}, rng), random_input("b1", {8}, rng),
                                random_input("w2", {8, 3}, rng), random_input("b2", {3}, rng),
                                random_input("x", {5, 4}, rng)};
  ops.push_back({"labels", TensorType{DType::i32, {5}}, F64Tensor{{5}, {0, 2, 1, 2, 0}}});
  Graph g = build_graph(ops, [](Graph&, std::vector<Value>& in) {
    Value hidden = relu(matmul(in[4], in[0]) + in[1]);
    return std::vector<Value>{cross_entropy_mean(matmul(hidden, in[2]) + in[3], in[5])};
  });
  GradientReport r = check_gradients(g, ops, names_of(ops, 5));
  INFO(r.worst);
  CHECK(r.max_error < 1e-6);
}

TEST_CASE("layernorm inside a model has exact gradients", "[composite]") {
  std::mt19937_64 rng(2);
  std::vector<NamedOperand> ops{random_input("x", {3, 6}, rng), random_input("gamma", {6}, rng),
                                random_input("beta", {6}, rng), random_input("r", {3, 6}, rng)};
  Graph g = build_graph(ops, [](Graph&, std::vector<Value>& in) {
    Value y = layernorm(in[0], in[1], in[2]);
    return std::vector<Value>{sum(tanh(y) * in[3])};
  });
  GradientReport r = check_gradients(g, ops, names_of(ops, 3));
  INFO(r.worst);
  CHECK(r.max_error < 1e-6);
}

TEST_CASE("causal attention has exact gradients", "[composite]") {
  std::mt19937_64 rng(3);
  std::vector<NamedOperand> ops{
      random_input("q", {2, 4, 8}, rng), random_input("k", {2, 4, 8}, rng),
      random_input("v", {2, 4, 8}, rng), random_input("r", {2, 4, 8}, rng)};
  Graph g = build_graph(ops, [](Graph& graph, std::vector<Value>& in) {
    return std::vector<Value>{sum(causal_attention(graph, in[0], in[1], in[2]) * in[3])};
  });
  GradientReport r = check_gradients(g, ops, names_of(ops, 3));
  INFO(r.worst);
  CHECK(r.max_error < 1e-6);
}

TEST_CASE("causal attention lets a position see only itself and earlier positions", "[composite]") {
  std::mt19937_64 rng(4);
  std::vector<NamedOperand> ops{random_input("q", {1, 3, 4}, rng),
                                random_input("k", {1, 3, 4}, rng),
                                random_input("v", {1, 3, 4}, rng)};
  Graph g = build_graph(ops, [](Graph& graph, std::vector<Value>& in) {
    return std::vector<Value>{causal_attention(graph, in[0], in[1], in[2])};
  });
  F64Tensor before = evaluate(g, values_of(ops))[0];
  // Position 0 attends only to itself: its output is v[0].
  for (int d = 0; d < 4; ++d)
    CHECK(before.data[d] == Approx(ops[2].value.data[d]).epsilon(1e-12));
  // Changing the last position's key and value leaves earlier outputs unchanged.
  for (int d = 0; d < 4; ++d) {
    ops[1].value.data[8 + d] += 5;
    ops[2].value.data[8 + d] -= 3;
  }
  F64Tensor after = evaluate(g, values_of(ops))[0];
  for (int i = 0; i < 8; ++i)
    CHECK(after.data[i] == Approx(before.data[i]).epsilon(1e-12));
  CHECK(after.data[8] != Approx(before.data[8]));
}

TEST_CASE("a gradient that is NaN fails the finite-difference check", "[composite]") {
  // where(x < 0, 0, sqrt(x)): the untaken branch's gradient is NaN at negative x, and
  // 0 * NaN stays NaN — the classic masked-sqrt bug a gradient check must catch.
  std::vector<NamedOperand> ops{
      {"x", TensorType{DType::f64, {3}}, F64Tensor{{3}, {-1.0, 0.5, 2.0}}}};
  Graph g = build_graph(ops, [](Graph&, std::vector<Value>& in) {
    Value x = in[0];
    Value zero = scalar_like(x, 0.0);
    return std::vector<Value>{sum(where(less(x, zero), zero, sqrt(x)))};
  });
  GradientReport r = check_gradients(g, ops, {"x"});
  INFO(r.worst);
  CHECK_FALSE(r.max_error < 1e-6);
  CHECK(r.worst.find("nan") != std::string::npos);
}

TEST_CASE("backend comparisons treat NaN and infinity as mismatches", "[composite]") {
  F64Tensor nan{{2}, {1.0, std::nan("")}}, inf{{2}, {1.0, INFINITY}};
  CHECK(max_relative_difference(nan, nan) == INFINITY);
  CHECK(max_relative_difference(inf, inf) == INFINITY);
  CHECK(max_relative_difference(F64Tensor{{2}, {1.0, 2.0}}, nan) == INFINITY);
  CHECK(max_relative_difference(F64Tensor{{2}, {1.0, 2.0}}, F64Tensor{{2}, {1.0, 2.0}}) == 0);
}
