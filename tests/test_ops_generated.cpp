// tests/test_ops_generated.cpp — two test cases per registered op, generated from the registry:
// forward vs the op's float64 reference, gradient vs central finite differences
#include "numeric_check.hpp"

#include "op_test_registry.hpp"

#include <catch2/catch.hpp>

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
    PreparedCase p = prepare(op, cases[k], 1000 * static_cast<uint64_t>(op) + k);
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
    PreparedCase p = prepare(op, cases[k], 1000 * static_cast<uint64_t>(op) + k);
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

const bool forward_matches_reference_registered = register_op_tests<forward_matches_reference>(
    "forward matches the float64 reference", "[ops][forward]");
const bool gradient_matches_finite_differences_registered =
    register_op_tests<gradient_matches_finite_differences>(
        "gradient matches central finite differences", "[ops][gradient]", true);

} // namespace
} // namespace sinter::testing
