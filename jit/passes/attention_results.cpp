// jit/passes/attention_results.cpp — fused attention writing its results where their readers
// want them (token-major outputs, packed gradients) for CUDA, and back to one head-major
// result per node for backends whose kernels write only that
#include "jit/passes/passes.hpp"
#include "ops/attention_attrs.hpp"

#include <array>
#include <map>
#include <optional>

namespace sinter {
namespace {

using namespace attention_attrs;

bool is_heads_rows_swap(const Node& n) {
  return n.op == OpId::permute && n.type.shape.size() >= 3 &&
         n.attrs.ints == heads_rows_swap(n.type.shape.size());
}

/// How many nodes read each value (once per operand position).
std::vector<std::size_t> reader_counts(const Graph& g) {
  std::vector<std::size_t> readers(g.size(), 0);
  for (ValueId id = 0; id < g.size(); ++id)
    for (ValueId in : g.node(id).inputs)
      ++readers[in];
  for (const NamedValue& out : g.outputs())
    ++readers[out.id];
  return readers;
}

/// The gradients of q, k and v summed into the packed projection's gradient: `root` adds up
/// three zero-pads of reshape(permute(gradient)), the heads merged token-major, each at its
/// part's place in the last dim ([..., T, 3·H·D], q's part first). Returns the three gradient
/// nodes (q's, k's, v's) when `root` is such a sum and nothing else reads its parts.
std::optional<std::array<ValueId, 3>> packed_gradient_sum(const Graph& g, ValueId root,
                                                          const std::vector<std::size_t>& readers) {
  std::vector<ValueId> pads, stack{root};
  while (!stack.empty()) { // the add tree's leaves
    ValueId v = stack.back();
    stack.pop_back();
    const Node& n = g.node(v);
    if (n.op == OpId::add && (v == root || readers[v] == 1) && n.inputs.size() == 2) {
      stack.insert(stack.end(), n.inputs.begin(), n.inputs.end());
      continue;
    }
    if (n.op != OpId::pad || readers[v] != 1 || pads.size() == 3) return std::nullopt;
    pads.push_back(v);
  }
  if (pads.size() != 3) return std::nullopt;
  std::array<ValueId, 3> grads{};
  std::array<bool, 3> seen{};
  for (ValueId pad : pads) {
    const Node& p = g.node(pad);
    ValueId merged = p.inputs[0];
    const Node& reshape = g.node(merged);
    if (reshape.op != OpId::reshape || readers[merged] != 1) return std::nullopt;
    ValueId permuted = reshape.inputs[0];
    const Node& permute = g.node(permuted);
    if (!is_heads_rows_swap(permute) || readers[permuted] != 1) return std::nullopt;
    ValueId grad = permute.inputs[0];
    const Node& gn = g.node(grad);
    if (gn.op != OpId::fused_attention_grad || readers[grad] != 1 || gn.attrs.ints.size() != 1 ||
        gn.attrs.ints[0] < grad_q || gn.attrs.ints[0] > grad_v)
      return std::nullopt;
    // The heads [..., T, H, D] reshaped to X and padded along one dim k of X alone, to three
    // times its size: X's dims before k hold (..., T) and the rest H·D (X = [..., T, H·D] or
    // [..., T, 1, H, D], say). Element (.., t, h, d) then lands where the packed [..., T, 3, H,
    // D] puts part `which`'s.
    const Shape& heads = permute.type.shape;
    const Shape& x = reshape.type.shape;
    const int64_t part = heads[heads.size() - 2] * heads.back(); // H·D
    auto which = static_cast<int64_t>(gn.attrs.ints[0]);
    std::size_t k = 0;
    while (k < x.size() && p.attrs.ints[k] == 0 && p.attrs.ints2[k] == 0)
      ++k;
    if (k == x.size()) return std::nullopt;
    for (std::size_t i = k + 1; i < x.size(); ++i)
      if (p.attrs.ints[i] != 0 || p.attrs.ints2[i] != 0) return std::nullopt;
    int64_t outer = 1, inner = 1;
    for (std::size_t i = 0; i < x.size(); ++i)
      (i < k ? outer : inner) *= x[i];
    if (outer * part != numel(heads) || inner != part || p.attrs.ints[k] != which * x[k] ||
        p.attrs.ints2[k] != (2 - which) * x[k] || seen[static_cast<std::size_t>(which)])
      return std::nullopt;
    seen[static_cast<std::size_t>(which)] = true;
    grads[static_cast<std::size_t>(which)] = grad;
  }
  const Node& q = g.node(grads[0]);
  for (ValueId other : {grads[1], grads[2]}) {
    const Node& n = g.node(other);
    if (n.inputs != q.inputs || n.attrs.real != q.attrs.real || n.attrs.flag != q.attrs.flag)
      return std::nullopt;
  }
  const Shape& shape = g.type(q.inputs[0]).shape;
  if (shape.size() < 3 || g.type(q.inputs[1]).shape != shape ||
      g.type(q.inputs[2]).shape != shape || g.type(grads[0]).dtype != g.type(root).dtype)
    return std::nullopt;
  return grads;
}

} // namespace

Graph attention_results_in_place(const Graph& graph) {
  std::vector<std::size_t> readers = reader_counts(graph);
  std::vector<bool> merges_heads(graph.size(), false); // a forward whose heads a swap reads
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    if (is_heads_rows_swap(n) && graph.node(n.inputs[0]).op == OpId::fused_attention &&
        graph.node(n.inputs[0]).attrs.ints.empty())
      merges_heads[n.inputs[0]] = true;
  }
  struct Made {
    std::vector<Value> operands;
    uint32_t scope;
  };
  std::map<ValueId, Made> gradient_operands; // by original gradient node
  Graph out = rebuild(graph, [&](const Node& n, std::span<const Value> operands) -> Value {
    if (operands.empty()) return {};
    Graph& g = *operands[0].graph;
    const ValueId id = graph.id_of(n);
    if (n.op == OpId::fused_attention_grad)
      gradient_operands[id] = {{operands.begin(), operands.end()}, g.current_scope()};
    if (n.op == OpId::fused_attention && merges_heads[id]) {
      Attrs attrs = n.attrs;
      attrs.ints = {token_major};
      Value written = emit(g, OpId::fused_attention, operands, std::move(attrs));
      return permute(written, heads_rows_swap(n.type.shape.size())); // for its other readers
    }
    if (is_heads_rows_swap(n)) { // the heads' merge reads the token-major result itself
      const Node& under = operands[0].node();
      if (is_heads_rows_swap(under) && writes_token_major(g.node(under.inputs[0])))
        return Value{&g, under.inputs[0]};
      return {};
    }
    if (n.op != OpId::add) return {};
    std::optional<std::array<ValueId, 3>> grads = packed_gradient_sum(graph, id, readers);
    if (!grads) return {};
    const Made& made = gradient_operands.at((*grads)[0]);
    Attrs attrs = graph.node((*grads)[0]).attrs;
    attrs.ints = {grad_packed};
    uint32_t scope = g.current_scope();
    g.set_current_scope(made.scope);
    Value packed = emit(g, OpId::fused_attention_grad, made.operands, std::move(attrs));
    g.set_current_scope(scope);
    return reshape(packed, n.type.shape);
  });
  return cse(out); // drops the per-gradient nodes nothing reads now
}

Graph head_major_attention(const Graph& graph) {
  return rebuild(graph, [](const Node& n, std::span<const Value> operands) -> Value {
    if (operands.empty()) return {};
    Graph& g = *operands[0].graph;
    std::size_t rank = g.type(operands[0].id).shape.size();
    if (writes_token_major(n)) {
      Attrs attrs = n.attrs;
      attrs.ints.clear();
      return permute(emit(g, OpId::fused_attention, operands, std::move(attrs)),
                     heads_rows_swap(rank));
    }
    if (!writes_packed(n)) return {};
    std::vector<Value> grads;
    for (int64_t which : {grad_q, grad_k, grad_v}) {
      Attrs attrs = n.attrs;
      attrs.ints = {which};
      grads.push_back(emit(g, OpId::fused_attention_grad, operands, std::move(attrs)));
    }
    return pack_gradients(grads);
  });
}

} // namespace sinter
