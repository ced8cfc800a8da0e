// jit/passes/rebuild.cpp — copies the live nodes of a graph into a new one through a rewrite
#include "jit/passes/passes.hpp"

namespace sinter {

Graph rebuild(const Graph& graph, const NodeRewrite& replace, bool may_retype) {
  std::vector<bool> live(graph.size(), false);
  for (const NamedValue& out : graph.outputs())
    live[out.id] = true;
  for (ValueId id = static_cast<ValueId>(graph.size()); id-- > 0;)
    if (live[id])
      for (ValueId in : graph.node(id).inputs)
        live[in] = true;

  Graph out;
  std::vector<uint32_t> scope_map = copy_scopes(graph, out);

  std::vector<Value> mapped(graph.size());
  for (const NamedValue& in : graph.inputs())
    mapped[in.id] = Value{&out, out.add_input(in.name, graph.type(in.id))};

  std::vector<Value> operands;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    if (!live[id] || n.op == OpId::input) continue;
    operands.clear();
    for (ValueId in : n.inputs)
      operands.push_back(mapped[in]);
    out.set_current_scope(scope_map[n.scope]);
    Value v = replace ? replace(n, operands) : Value{};
    if (!v) {
      Node copy = n;
      for (std::size_t i = 0; i < copy.inputs.size(); ++i)
        copy.inputs[i] = operands[i].id;
      v = Value{&out, out.add(std::move(copy))};
    }
    if (!may_retype && v.type() != n.type)
      throw VerifyError("sinter: rewrite of %" + std::to_string(id) + " (" +
                        std::string(op_name(n.op)) + ") changed its type from " +
                        to_string(n.type) + " to " + to_string(v.type()));
    mapped[id] = v;
  }
  out.set_current_scope(0);
  for (const NamedValue& o : graph.outputs())
    out.add_output(o.name, mapped[o.id].id);
  out.set_donations(graph.donations());
  return out;
}

Graph cse(const Graph& graph) { return rebuild(graph, nullptr); }

std::vector<uint32_t> copy_scopes(const Graph& from, Graph& into) {
  std::vector<uint32_t> scopes(from.scope_count(), 0);
  for (uint32_t s = 1; s < from.scope_count(); ++s)
    scopes[s] = into.intern_scope(from.scope_path(s), from.scope_precision(s));
  return scopes;
}

} // namespace sinter
