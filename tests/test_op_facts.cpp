// tests/test_op_facts.cpp — every op has the facts its kernel kind needs, generated from the
// registry: loop and reduce primitives compile through the shared emitter, reductions have an
// identity and a combine that agree with each other and with the op's reference
#include "jit/backend/cpu/cpu_target.hpp"
#include "numeric_check.hpp"

#include "op_test_registry.hpp"

#include <catch2/catch.hpp>

#include <limits>
#include <stdexcept>

namespace sinter::testing {
namespace {

/// Reducer::Combine in float64, as ops/registry.hpp defines each one.
double combined(Reducer::Combine combine, double acc, double x) {
  switch (combine) {
  case Reducer::Combine::add: return acc + x;
  case Reducer::Combine::max: return acc < x ? x : acc;
  case Reducer::Combine::min: return x < acc ? x : acc;
  }
  throw std::logic_error("a Reducer::Combine this test does not know");
}

/// The identity leaves every value as it is, whichever side it is on.
void identity_is_neutral(const Reducer& reducer) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (double x : {-7.25, -1.0, 0.0, 3.0, 1e300, -1e300, inf, -inf}) {
    INFO("x = " << x << ", identity " << reducer.identity);
    CHECK(combined(reducer.combine, reducer.identity, x) == x);
    CHECK(combined(reducer.combine, x, reducer.identity) == x);
  }
}

/// The fact describes the op: folding values from the identity with the combine gives what the
/// op's own (independent) reference gives.
void fold_matches_reference(const OpDef& def) {
  const std::vector<double> values{2.5, -4.0, 7.0, 0.5, -4.0, 6.0};
  const auto count = static_cast<int64_t>(values.size());
  double folded = def.reducer->identity;
  for (double v : values)
    folded = combined(def.reducer->combine, folded, v);
  F64Tensor operand{{count}, values};
  F64Tensor want = def.reference(std::span<const F64Tensor>(&operand, 1), Attrs{.ints = {0}},
                                 TensorType{DType::f64, {}});
  REQUIRE(want.data.size() == 1);
  CHECK(folded == want.data[0]);
}

/// Emits and compiles (CPU, O3) every kernel that fusion makes of the op's first test case, so
/// an op without an elemental case in jit/codegen's emitter, or a reduction the emitter cannot
/// fold, fails here with the emitter's own message.
void compiles_through_the_emitter(OpId op) {
  static CpuTarget target;
  const OpTestCase c = op_def(op).test_cases().at(0);
  std::mt19937_64 rng(31);
  std::vector<NamedOperand> operands;
  for (std::size_t i = 0; i < c.operands.size(); ++i) {
    const TestOperand& spec = c.operands[i];
    operands.push_back(
        {"x" + std::to_string(i), TensorType{spec.dtype, spec.shape}, random_operand(spec, rng)});
  }
  Graph g = build_graph(operands, [&](Graph& graph, std::vector<Value>& in) {
    return std::vector<Value>{emit(graph, op, in, c.attrs)};
  });
  FusionPlan plan = fuse(g);
  INFO(plan.print());
  std::size_t compiled = 0;
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    const Kernel& kernel = plan.kernels[k];
    if (kernel.kind != KernelKind::loop && kernel.kind != KernelKind::reduce) continue;
    compiled += g.node(kernel.root).op == op;
    std::vector<char> object = target.compile(plan, kernel, "k" + std::to_string(k));
    CHECK_FALSE(object.empty());
  }
  CHECK(compiled == 1); // the op's node roots a kernel of its own kind
}

void has_what_its_kernel_kind_needs(OpId op) {
  const OpDef& def = op_def(op);
  INFO(op_name(op) << ": kernel_kind " << kernel_kind_name(def.kernel_kind));
  CHECK(def.kernel_kind != KernelKind::row); // made by fusion only
  CHECK(def.reducer.has_value() == (def.kernel_kind == KernelKind::reduce));
  if (!is_primitive(op)) { // lowered before fusion: it never roots a kernel
    CHECK(def.kernel_kind == KernelKind::loop);
    return;
  }
  if (def.kernel_kind == KernelKind::reduce) {
    REQUIRE(def.reducer);
    identity_is_neutral(*def.reducer);
    fold_matches_reference(def);
  }
  if (def.kernel_kind == KernelKind::loop || def.kernel_kind == KernelKind::reduce)
    compiles_through_the_emitter(op);
}

const bool registered = register_op_tests<has_what_its_kernel_kind_needs>(
    "has what its kernel kind needs (emitter case, reduction identity and combine)", "[op-facts]");

} // namespace
} // namespace sinter::testing
