// jit/passes/share_rows.cpp — inline_graph, and share_taken_rows: reuse a batch's forward values
// for a sub-batch of its rows (in-step sifting)
#include "jit/passes/passes.hpp"
#include "ops/registry.hpp"

#include <algorithm>
#include <limits>
#include <map>

namespace sinter {
namespace {

constexpr ValueId no_partner = std::numeric_limits<ValueId>::max();

/// Whether `whole` and `part` carry the same attributes apart from their row counts: shape-like
/// attributes (reshape and broadcast targets, slice limits) may differ in entry 0 when it is each
/// node's own dim 0.
bool same_attrs_but_rows(const Node& whole, const Node& part) {
  const Attrs &a = whole.attrs, &b = part.attrs;
  if (a.real != b.real || a.flag != b.flag || a.dtype != b.dtype) return false;
  auto same_list = [&](const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (x[i] != y[i] &&
          !(i == 0 && x[0] == whole.type.shape.at(0) && y[0] == part.type.shape.at(0)))
        return false;
    return true;
  };
  return same_list(a.ints, b.ints) && same_list(a.ints2, b.ints2);
}

/// `whole` has the type of `part` with another dim 0.
bool same_type_but_rows(const TensorType& whole, const TensorType& part) {
  return whole.dtype == part.dtype && !whole.shape.empty() &&
         whole.shape.size() == part.shape.size() &&
         std::equal(whole.shape.begin() + 1, whole.shape.end(), part.shape.begin() + 1);
}

} // namespace

std::vector<Value> inline_graph(Graph& into, const Graph& from,
                                const std::function<Value(const NamedValue& input)>& input) {
  std::vector<uint32_t> scopes = copy_scopes(from, into);
  std::vector<ValueId> mapped(from.size(), no_partner);
  for (const NamedValue& in : from.inputs()) {
    Value v = input(in);
    if (v.graph != &into || v.type() != from.type(in.id))
      throw std::logic_error("sinter: inline_graph: input " + in.name +
                             " maps to a value of type " + to_string(v.type()) + ", not " +
                             to_string(from.type(in.id)));
    mapped[in.id] = v.id;
  }
  uint32_t scope = into.current_scope();
  for (ValueId id = 0; id < from.size(); ++id) {
    Node n = from.node(id);
    if (n.op == OpId::input) continue;
    for (ValueId& in : n.inputs)
      in = mapped[in];
    into.set_current_scope(scopes[n.scope]);
    mapped[id] = into.add(std::move(n));
  }
  into.set_current_scope(scope);
  std::vector<Value> outputs;
  for (const NamedValue& out : from.outputs())
    outputs.push_back(Value{&into, mapped[out.id]});
  return outputs;
}

Graph share_taken_rows(const Graph& graph, ValueId rows) {
  const TensorType& rows_type = graph.type(rows);
  if (rows_type.shape.size() != 1 || is_float(rows_type.dtype) || rows_type.dtype == DType::boolean)
    throw std::logic_error("sinter: share_taken_rows needs integer row indices [k], got " +
                           to_string(rows_type));
  // partner[v] = w: value v equals gather(w, rows), or with dim 0 in groups of r rows per
  // example ([B·r, ...] and [k·r, ...]), the same for each group.
  std::vector<ValueId> partner(graph.size(), no_partner);
  // taken_rows[v]: v's partner was found through the rows (a seed, or an operand read as its
  // partner that was). A value partnered only by shape, such as a constant broadcast to [k, n]
  // beside one to [B, n], lets the values computed from it find their partners, but computing it
  // again is cheaper than gathering it, and it need not belong to the batch at all.
  std::vector<bool> taken_rows(graph.size(), false);
  std::map<std::vector<uint64_t>, std::vector<ValueId>> by_operands; // {op, operands...}
  auto key = [](OpId op, std::span<const ValueId> operands) {
    std::vector<uint64_t> k{static_cast<uint64_t>(op)};
    k.insert(k.end(), operands.begin(), operands.end());
    return k;
  };
  // Every value of the rows' computation has k groups of rows, and its partner the batch's.
  const int64_t k = rows_type.shape[0];
  int64_t whole_rows = -1;
  for (ValueId id = 0; id < graph.size(); ++id)
    if (graph.node(id).op == OpId::gather && graph.node(id).inputs[1] == rows) {
      int64_t table_rows = graph.type(graph.node(id).inputs[0]).shape.at(0);
      if (whole_rows >= 0 && whole_rows != table_rows) return graph; // not one batch
      whole_rows = table_rows;
    }
  if (whole_rows < 0) return graph;
  std::vector<ValueId> choice;
  // Whole-batch values made for a node of the rows' computation (see fused_attention_lse).
  std::vector<Node> made;
  std::vector<std::size_t> made_at(graph.size(), std::numeric_limits<std::size_t>::max());
  std::vector<TensorType> types;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    if (n.op == OpId::gather && n.inputs[1] == rows) {
      partner[id] = n.inputs[0];
      taken_rows[id] = true;
    } else if (is_primitive(n.op) && op_def(n.op).row_wise && !n.type.shape.empty() &&
               n.type.shape[0] % k == 0 && n.inputs.size() <= 8) {
      const int64_t group_rows = n.type.shape[0] / k;
      // Try each way of reading every operand either as itself or as its partner (the whole
      // value it is rows of), and look for a node computing the same op from those.
      std::size_t m = n.inputs.size();
      for (uint32_t mask = 0; mask < (1u << m) && partner[id] == no_partner; ++mask) {
        choice.assign(n.inputs.begin(), n.inputs.end());
        bool possible = true;
        for (std::size_t i = 0; i < m && possible; ++i)
          if (mask & (1u << i)) {
            possible = partner[n.inputs[i]] != no_partner;
            choice[i] = partner[n.inputs[i]];
          }
        if (!possible) continue;
        auto found = by_operands.find(key(n.op, choice));
        if (found == by_operands.end()) continue;
        for (ValueId whole : found->second) {
          const Node& w = graph.node(whole);
          if (w.type.shape.empty() || w.type.shape[0] != whole_rows * group_rows ||
              !same_type_but_rows(w.type, n.type) || !same_attrs_but_rows(w, n))
            continue;
          types.clear();
          for (ValueId in : w.inputs)
            types.push_back(graph.type(in));
          bool taken[8] = {};
          for (std::size_t i = 0; i < m; ++i)
            taken[i] = mask & (1u << i);
          if (op_def(n.op).row_wise(types, std::span<const bool>(taken, m), w.attrs, w.type,
                                    whole_rows)) {
            partner[id] = whole;
            for (std::size_t i = 0; i < m; ++i)
              taken_rows[id] = taken_rows[id] || (taken[i] && taken_rows[n.inputs[i]]);
            break;
          }
        }
      }
      // The backward pass's attention log-sum-exp has no whole-batch twin, but the forward it
      // belongs to does: computed for the batch beside that forward (one kernel, or the same
      // scores), it is cheaper than attention scores again for the rows.
      if (partner[id] == no_partner && n.op == OpId::fused_attention_lse) {
        choice.assign(n.inputs.begin(), n.inputs.end());
        bool taken[8] = {};
        for (std::size_t i = 0; i < m; ++i)
          if (partner[n.inputs[i]] != no_partner) {
            choice[i] = partner[n.inputs[i]];
            taken[i] = true;
          }
        auto forward = by_operands.find(key(OpId::fused_attention, choice));
        if (forward != by_operands.end()) {
          Node whole = n;
          whole.inputs = choice;
          whole.type.shape[0] = whole_rows * group_rows;
          types.clear();
          for (ValueId in : choice)
            types.push_back(graph.type(in));
          bool same_forward =
              std::any_of(forward->second.begin(), forward->second.end(),
                          [&](ValueId f) { return graph.node(f).attrs == n.attrs; });
          if (same_forward && op_def(n.op).row_wise(types, std::span<const bool>(taken, m),
                                                    whole.attrs, whole.type, whole_rows)) {
            made_at[id] = made.size();
            made.push_back(std::move(whole));
          }
        }
      }
    }
    by_operands[key(n.op, n.inputs)].push_back(id);
  }

  // Rebuild with each partnered value read as rows of its partner (the seeds stay as they are).
  Graph out;
  std::vector<uint32_t> scopes = copy_scopes(graph, out);
  std::vector<ValueId> mapped(graph.size(), no_partner);
  for (const NamedValue& in : graph.inputs())
    mapped[in.id] = out.add_input(in.name, graph.type(in.id));
  for (ValueId id = 0; id < graph.size(); ++id) {
    Node n = graph.node(id);
    if (n.op == OpId::input) continue;
    out.set_current_scope(scopes[n.scope]);
    bool seed = n.op == OpId::gather && n.inputs[1] == rows;
    const bool has_made = made_at[id] != std::numeric_limits<std::size_t>::max();
    if ((partner[id] != no_partner && !seed && taken_rows[id]) || has_made) {
      Value whole;
      if (has_made) {
        Node m = made[made_at[id]];
        for (ValueId& in : m.inputs)
          in = mapped[in];
        whole = Value{&out, out.add(std::move(m))};
      } else {
        whole = Value{&out, mapped[partner[id]]};
      }
      Shape shape = n.type.shape;
      const int64_t group_rows = shape[0] / k;
      if (group_rows > 1) { // [B·r, ...] as [B, r, ...]: gather whole groups
        Shape grouped = whole.shape();
        grouped[0] = group_rows;
        grouped.insert(grouped.begin(), whole_rows);
        whole = reshape(whole, grouped);
      }
      Value taken = gather(whole, Value{&out, mapped[rows]});
      mapped[id] = (group_rows > 1 ? reshape(taken, shape) : taken).id;
      continue;
    }
    for (ValueId& in : n.inputs)
      in = mapped[in];
    mapped[id] = graph.recomputed(id) ? out.add_recomputed(std::move(n)) : out.add(std::move(n));
  }
  out.set_current_scope(0);
  for (const NamedValue& o : graph.outputs())
    out.add_output(o.name, mapped[o.id]);
  out.set_donations(graph.donations());
  return cse(out);
}

} // namespace sinter
