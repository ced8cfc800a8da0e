// tests/test_ops_generated.cpp — two test cases per registered op, generated from the registry:
// forward vs the op's float64 reference, gradient vs central finite differences
#include "numeric_check.hpp"

#include "op_test_registry.hpp"

#include <catch2/catch.hpp>

#include <numeric>
#include <sstream>
#include <utility>

namespace sinter::testing {
namespace {

struct PreparedCase {
  std::vector<NamedOperand> operands;
  Graph graph;
  TensorType result;
};

PreparedCase prepare(OpId op, const OpTestCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  PreparedCase p;
  for (std::size_t i = 0; i < c.operands.size(); ++i) {
    const TestOperand& spec = c.operands[i];
    p.operands.push_back(
        {"x" + std::to_string(i), TensorType{spec.dtype, spec.shape}, random_operand(spec, rng)});
  }
  p.graph = build_graph(p.operands, [&](Graph& g, std::vector<Value>& in) {
    return std::vector<Value>{emit(g, op, in, c.attrs)};
  });
  p.result = p.graph.type(p.graph.outputs()[0].id);
  return p;
}

std::string describe(OpId op, const OpTestCase& c) {
  std::ostringstream os;
  os << op_name(op) << "(";
  for (std::size_t i = 0; i < c.operands.size(); ++i)
    os << (i ? ", " : "") << to_string(TensorType{c.operands[i].dtype, c.operands[i].shape});
  os << ")";
  return os.str();
}

void forward_matches_reference(OpId op) {
  const OpDef& def = op_def(op);
  REQUIRE(def.test_cases);
  REQUIRE(def.reference);
  auto cases = def.test_cases();
  REQUIRE_FALSE(cases.empty());
  for (std::size_t k = 0; k < cases.size(); ++k) {
    INFO(describe(op, cases[k]));
    PreparedCase p = prepare(op, cases[k], op_seed(op) + 1000 + k);
    F64Tensor got = evaluate(p.graph, values_of(p.operands))[0];
    auto inputs = values_of(p.operands);
    F64Tensor want = def.reference(inputs, cases[k].attrs, p.result);
    CHECK(max_relative_difference(got, want) < 1e-12);
  }
}

void gradient_matches_finite_differences(OpId op) {
  const OpDef& def = op_def(op);
  auto cases = def.test_cases();
  for (std::size_t k = 0; k < cases.size(); ++k) {
    INFO(describe(op, cases[k]));
    PreparedCase p = prepare(op, cases[k], op_seed(op) + 1000 + k);
    std::vector<std::string> wrt;
    for (const NamedOperand& o : p.operands)
      if (is_float(o.type.dtype)) wrt.push_back(o.name);
    // Finite differences need float64 precision end to end: narrower results only round.
    if (p.result.dtype != DType::f64 || wrt.empty()) continue;
    // Project the result onto a fixed random tensor so every output element is checked.
    std::mt19937_64 rng(77 + k);
    NamedOperand projection{"projection", TensorType{DType::f64, p.result.shape},
                            random_operand(TestOperand{DType::f64, p.result.shape}, rng)};
    std::vector<NamedOperand> operands = p.operands;
    operands.push_back(projection);
    Graph g = build_graph(operands, [&](Graph& graph, std::vector<Value>& in) {
      std::vector<Value> op_inputs(in.begin(), in.end() - 1);
      Value y = cast(emit(graph, op, op_inputs, cases[k].attrs), DType::f64);
      return std::vector<Value>{sum(y * in.back())};
    });
    GradientReport r = check_gradients(g, operands, wrt);
    INFO("worst element: " << r.worst);
    CHECK(r.max_error < 1e-6);
  }
}

/// Groups `pick` of `t`, whose dim 0 holds `groups` groups of consecutive rows.
F64Tensor take_groups(const F64Tensor& t, const std::vector<int64_t>& pick, int64_t groups) {
  const int64_t width = numel(t.shape) / groups;
  F64Tensor out{t.shape, {}};
  out.shape[0] = t.shape[0] / groups * static_cast<int64_t>(pick.size());
  for (int64_t r : pick)
    out.data.insert(out.data.end(), t.data.begin() + r * width, t.data.begin() + (r + 1) * width);
  return out;
}

/// Wherever OpDef::row_wise says so, the op on groups of rows of its taken operands equals those
/// groups of its result (checked with the float64 reference for every way of taking the
/// operands; as many groups as the dim 0s allow).
void rows_match_row_wise_rule(OpId op) {
  const OpDef& def = op_def(op);
  auto cases = def.test_cases();
  int verified = 0;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    INFO(describe(op, cases[k]));
    PreparedCase p = prepare(op, cases[k], op_seed(op) + 1000 + k);
    const int64_t n = p.result.shape.empty() ? 0 : p.result.shape[0];
    if (n < 2 || p.operands.size() > 8) continue;
    // Groups: as many as divide the result's dim 0 and those of the operands that share a
    // factor with it ([3, 2, 4] reshaped to [6, 4]: 3 groups).
    int64_t groups = n;
    for (const NamedOperand& o : p.operands)
      if (!o.type.shape.empty() && std::gcd(o.type.shape[0], n) >= 2)
        groups = std::gcd(groups, o.type.shape[0]);
    std::vector<TensorType> types;
    for (const NamedOperand& o : p.operands)
      types.push_back(o.type);
    auto whole = values_of(p.operands);
    const std::vector<int64_t> pick{groups - 1, 0};
    for (uint32_t mask = 0; mask < (1u << types.size()); ++mask) {
      bool taken[8] = {};
      for (std::size_t i = 0; i < types.size(); ++i)
        taken[i] = mask & (1u << i);
      if (!def.row_wise(types, std::span<const bool>(taken, types.size()), cases[k].attrs, p.result,
                        groups))
        continue;
      INFO("taken operands mask " << mask);
      std::vector<NamedOperand> part = p.operands;
      for (std::size_t i = 0; i < types.size(); ++i)
        if (taken[i]) {
          REQUIRE(types[i].shape.size() >= 1);
          REQUIRE(types[i].shape[0] % groups == 0); // a taken operand holds whole groups
          part[i].value = take_groups(whole[i], pick, groups);
          part[i].type.shape[0] = part[i].value.shape[0];
        }
      // Shape-like attributes (reshape and broadcast targets) name the row count in entry 0.
      Attrs attrs = cases[k].attrs;
      const int64_t part_rows = n / groups * 2;
      if (!attrs.ints.empty() && attrs.ints[0] == n) attrs.ints[0] = part_rows;
      if (!attrs.ints2.empty() && attrs.ints2[0] == n) attrs.ints2[0] = part_rows;
      Graph part_graph = build_graph(part, [&](Graph& g, std::vector<Value>& in) {
        return std::vector<Value>{emit(g, op, in, attrs)};
      });
      F64Tensor got = evaluate(part_graph, values_of(part))[0];
      F64Tensor want = take_groups(evaluate(p.graph, whole)[0], pick, groups);
      REQUIRE(got.shape == want.shape);
      CHECK(max_relative_difference(got, want) < 1e-12);
      ++verified;
    }
  }
  CHECK(verified > 0); // the op's test cases exercise its rule at least once
}

bool has_row_rule(const OpDef& def) { return def.row_wise != nullptr; }

const bool forward_matches_reference_registered = register_op_tests<forward_matches_reference>(
    "forward matches the float64 reference", "[ops][forward]");
const bool gradient_matches_finite_differences_registered =
    register_op_tests<gradient_matches_finite_differences>(
        "gradient matches central finite differences", "[ops][gradient]", differentiable_op);
const bool rows_match_row_wise_rule_registered = register_op_tests<rows_match_row_wise_rule>(
    "rows along dim 0 stay apart where row_wise says so", "[ops][rows]", has_row_rule);

} // namespace
} // namespace sinter::testing

TEST_CASE("row_wise refuses ops that mix rows along dim 0", "[ops][rows]") {
  using sinter::DType;
  auto f = [](sinter::Shape s) { return sinter::TensorType{DType::f32, std::move(s)}; };
  auto rule = [](sinter::OpId op, std::vector<sinter::TensorType> in, std::vector<char> taken,
                 sinter::Attrs a, sinter::TensorType out, int64_t groups = 0) {
    bool t[8] = {};
    for (std::size_t i = 0; i < taken.size(); ++i)
      t[i] = taken[i];
    return sinter::op_def(op).row_wise(in, std::span<const bool>(t, in.size()), a, out,
                                       groups ? groups : out.shape.at(0));
  };
  using sinter::OpId;
  CHECK_FALSE(rule(OpId::reduce_sum, {f({4, 4})}, {1}, {.ints = {0}}, f({4})));
  CHECK(rule(OpId::reduce_sum, {f({4, 4})}, {1}, {.ints = {1}}, f({4})));
  CHECK_FALSE(rule(OpId::permute, {f({4, 4})}, {1}, {.ints = {1, 0}}, f({4, 4})));
  CHECK_FALSE(rule(OpId::matmul, {f({4, 4}), f({4, 4})}, {0, 1}, {}, f({4, 4})));
  CHECK_FALSE(rule(OpId::matmul, {f({4, 4}), f({4, 4})}, {1, 1}, {}, f({4, 4})));
  CHECK_FALSE(rule(OpId::concat, {f({2, 3}), f({2, 3})}, {1, 1}, {.ints = {0}}, f({4, 3})));
  CHECK_FALSE(rule(OpId::add, {f({4, 3}), f({4, 3})}, {1, 0}, {}, f({4, 3})));
  CHECK_FALSE(rule(OpId::reshape, {f({4, 3})}, {1}, {.ints = {2, 6}}, f({2, 6}), 4));
  CHECK(rule(OpId::reshape, {f({4, 3})}, {1}, {.ints = {12}}, f({12}), 4)); // 4 groups of 3 rows
  CHECK(sinter::op_def(OpId::scatter_add).row_wise == nullptr);
  CHECK(sinter::op_def(OpId::iota).row_wise == nullptr);
}
