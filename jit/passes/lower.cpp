// jit/passes/lower.cpp — expands composite ops into primitives (each op's `lower` rule)
#include "jit/passes/passes.hpp"
#include "ops/registry.hpp"

namespace sinter {
namespace {

// A lowering may use other composites (softmax uses max and sum), so passes repeat to a
// fixpoint; the nesting depth of composites is small and fixed by ops/.
constexpr int max_lowering_depth = 16;

bool any_node(const Graph& g, const std::function<bool(OpId)>& selected) {
  for (ValueId id = 0; id < g.size(); ++id)
    if (selected(g.node(id).op)) return true;
  return false;
}

Graph lower_until_none(const Graph& graph, const std::function<bool(OpId)>& selected) {
  Graph g = graph;
  for (int round = 0; round < max_lowering_depth; ++round) {
    if (!any_node(g, selected)) return g;
    g = rebuild(g, [&](const Node& n, std::span<const Value> operands) -> Value {
      if (!selected(n.op)) return {};
      if (n.op == OpId::stop_gradient) return operands[0];
      // What a composite expands to is named after it (`blocks.0.attn.softmax`).
      ScopeGuard named(*operands[0].graph, op_name(n.op));
      return op_def(n.op).lower(operands, n.attrs);
    });
  }
  throw std::logic_error("sinter: composite lowering did not reach primitives");
}

} // namespace

Graph lower_selected(const Graph& graph, const std::function<bool(OpId)>& selected) {
  return lower_until_none(graph, [&](OpId op) { return !is_primitive(op) && selected(op); });
}

Graph decompose(const Graph& graph, const std::function<bool(OpId)>& selected) {
  Graph expanded = lower_until_none(
      graph, [&](OpId op) { return (selected(op) && op_def(op).lower) || !is_primitive(op); });
  return cse(simplify(expanded));
}

Graph decompose_nodes(const Graph& graph, const NodeSelector& selected) {
  Graph expanded = rebuild(graph, [&](const Node& n, std::span<const Value> operands) -> Value {
    if (!op_def(n.op).lower || !selected(n, operands)) return {};
    ScopeGuard named(*operands[0].graph, op_name(n.op));
    return op_def(n.op).lower(operands, n.attrs);
  });
  return cse(simplify(lower_until_none(expanded, [](OpId op) { return !is_primitive(op); })));
}

Graph lower(const Graph& graph) {
  return lower_until_none(graph,
                          [](OpId op) { return !is_primitive(op) || op == OpId::stop_gradient; });
}

} // namespace sinter
