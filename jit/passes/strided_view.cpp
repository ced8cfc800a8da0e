// jit/passes/strided_view.cpp — the offset and strides of a chain of reshapes, permutes and
// slices over a buffer, and the pass that moves attention operands' casts above such chains
#include "jit/passes/strided_view.hpp"
#include "jit/passes/fuse.hpp"
#include "jit/passes/passes.hpp"

namespace sinter {
namespace {

/// The strides of `to` over the elements that `strides` lay out as `from` (the same count), or
/// nullopt when a dim of `to` spans dims of `from` that are not evenly spaced. Dims of `from`
/// are taken in runs whose strides chain (stride[i] = stride[i + 1] · size[i + 1]); each run
/// must be covered by whole dims of `to`.
std::optional<std::vector<int64_t>>
reshaped_strides(const Shape& from, const std::vector<int64_t>& strides, const Shape& to) {
  std::vector<int64_t> out(to.size(), 1);
  if (numel(to) == 0) return out;
  if (from.empty()) return out; // a scalar: every dim of `to` is 1
  int64_t to_dim = static_cast<int64_t>(to.size()) - 1;
  int64_t base = strides.back(), run = 1, covered = 1;
  for (int64_t dim = static_cast<int64_t>(from.size()) - 1; dim >= 0; --dim) {
    run *= from[dim];
    bool run_ends = dim == 0 || (from[dim - 1] != 1 && strides[dim - 1] != run * base);
    if (!run_ends) continue;
    while (to_dim >= 0 && (covered < run || to[to_dim] == 1)) {
      out[to_dim] = covered * base;
      covered *= to[to_dim];
      --to_dim;
    }
    if (covered != run) return std::nullopt;
    if (dim > 0) {
      base = strides[dim - 1];
      run = 1;
      covered = 1;
    }
  }
  if (to_dim != -1) return std::nullopt;
  return out;
}

} // namespace

bool is_view_op(OpId op) { return op == OpId::reshape || op == OpId::permute || op == OpId::slice; }

Graph cast_before_attention_views(const Graph& graph) {
  return rebuild(graph, [](const Node& node, std::span<const Value> operands) -> Value {
    if (!is_fused_attention(node.op)) return {};
    std::vector<Value> moved(operands.begin(), operands.end());
    bool changed = false;
    for (std::size_t i = 0; i < moved.size(); ++i) {
      const Node& cast_node = moved[i].node();
      if (!attention_operand_may_be_strided(node, i) || cast_node.op != OpId::cast) continue;
      Graph& g = *moved[i].graph;
      // The views from the value under them up to the cast, outermost last.
      std::vector<ValueId> views;
      ValueId under = cast_node.inputs[0];
      while (is_view_op(g.node(under).op)) {
        views.push_back(under);
        under = g.node(under).inputs[0];
      }
      if (views.empty() || !is_float(g.type(under).dtype) || !is_float(moved[i].dtype())) continue;
      const DType to = moved[i].dtype();
      Value v = cast(Value{&g, under}, to); // one cast the operands' views share
      for (std::size_t k = views.size(); k-- > 0;) {
        const Node& view = g.node(views[k]);
        Attrs attrs = view.attrs;
        v = emit(g, view.op, std::vector<Value>{v}, std::move(attrs));
      }
      moved[i] = v;
      changed = true;
    }
    if (!changed) return {};
    return emit(*operands[0].graph, node.op, moved, node.attrs);
  });
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;)
    strides[i - 1] = strides[i] * shape[i];
  return strides;
}

std::optional<StridedView> strided_view(const Graph& g, ValueId value,
                                        const std::function<bool(ValueId)>& is_buffer) {
  if (is_buffer(value)) return StridedView{value, 0, contiguous_strides(g.type(value).shape)};
  const Node& node = g.node(value);
  if (!is_view_op(node.op)) return std::nullopt;
  std::optional<StridedView> view = strided_view(g, node.inputs[0], is_buffer);
  if (!view) return std::nullopt;
  const Shape& from = g.type(node.inputs[0]).shape;
  if (node.op == OpId::permute) {
    std::vector<int64_t> strides;
    for (int64_t axis : node.attrs.ints)
      strides.push_back(view->strides[static_cast<std::size_t>(axis)]);
    view->strides = std::move(strides);
  } else if (node.op == OpId::slice) {
    for (std::size_t i = 0; i < from.size(); ++i)
      view->offset += node.attrs.ints[i] * view->strides[i];
  } else {
    std::optional<std::vector<int64_t>> strides =
        reshaped_strides(from, view->strides, g.type(value).shape);
    if (!strides) return std::nullopt;
    view->strides = std::move(*strides);
  }
  return view;
}

} // namespace sinter
