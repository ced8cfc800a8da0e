// jit/passes/lower.cpp — expands composite ops into primitives (each op's `lower` rule)
#include "jit/passes/passes.hpp"
#include "ops/registry.hpp"

namespace sinter {
namespace {

bool has_composites(const Graph& g) {
  for (ValueId id = 0; id < g.size(); ++id)
    if (!is_primitive(g.node(id).op)) return true;
  return false;
}

} // namespace

Graph lower(const Graph& graph) {
  // A lowering may use other composites (softmax uses max and sum), so repeat to a fixpoint;
  // the nesting depth of composites is small and fixed by ops/.
  constexpr int max_depth = 16;
  Graph g = graph;
  for (int round = 0; round < max_depth; ++round) {
    bool stop_gradients = false;
    for (ValueId id = 0; id < g.size() && !stop_gradients; ++id)
      stop_gradients = g.node(id).op == OpId::stop_gradient;
    if (!has_composites(g) && !stop_gradients) return g;
    g = rebuild(g, [](const Node& n, std::span<const Value> operands) -> Value {
      if (n.op == OpId::stop_gradient) return operands[0];
      if (is_primitive(n.op)) return {};
      return op_def(n.op).lower(operands, n.attrs);
    });
  }
  throw std::logic_error("sinter: composite lowering did not reach primitives");
}

} // namespace sinter
