// jit/backend/attention_layout.cpp — a fused attention node's slice sizes and mask strides
#include "jit/backend/attention_layout.hpp"
#include "ops/attention_attrs.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace sinter {

AttentionLayout attention_layout(const Graph& g, const Node& root) {
  AttentionLayout l;
  l.backward = root.op == OpId::fused_attention_grad;
  const Shape& q = g.type(root.inputs[0]).shape;
  const Shape& v = g.type(root.inputs[2]).shape;
  std::size_t r = q.size();
  l.tq = q[r - 2];
  l.d = q[r - 1];
  l.tk = v[r - 2];
  l.dv = v[r - 1];
  l.batch_dims = Shape(q.begin(), q.end() - 2);
  l.batches = numel(l.batch_dims);
  l.scale = root.attrs.real != 0.0 ? root.attrs.real : 1.0 / std::sqrt(static_cast<double>(l.d));
  l.causal = root.attrs.flag;
  for (ValueId operand : root.inputs) {
    const Shape& shape = g.type(operand).shape;
    std::vector<int64_t> strides = contiguous_strides(shape);
    AttentionOperand o{operand, 0, {}, strides.size() >= 2 ? strides[strides.size() - 2] : 0};
    if (shape.size() == r) o.batch_stride.assign(strides.begin(), strides.end() - 2);
    l.operands.push_back(std::move(o));
  }
  l.mask_operand = l.backward ? 6 : 3;
  l.has_mask = root.inputs.size() > l.mask_operand;
  if (!l.has_mask) return l;
  // Strides of the mask over the scores it broadcasts to (0 along dims where it is 1).
  const Shape& m = g.type(root.inputs[l.mask_operand]).shape;
  std::vector<int64_t> stride(r, 0);
  int64_t step = 1;
  std::size_t lead = r - m.size();
  for (std::size_t i = r; i-- > lead;) {
    if (m[i - lead] != 1) stride[i] = step;
    step *= m[i - lead];
  }
  l.mask_batch_stride.assign(stride.begin(), stride.end() - 2);
  l.mask_row_stride = stride[r - 2];
  l.mask_col_stride = stride[r - 1];
  return l;
}

namespace {

/// Where `part` (0 q or o, 1 k, 2 v) of attention result `value` lies, as slices over the
/// head-major batch dims [lead..., H].
AttentionOperand result_place(const Graph& g, ValueId value, int64_t part) {
  const Node& n = g.node(value);
  const Shape& shape = n.type.shape;
  std::vector<int64_t> strides = contiguous_strides(shape);
  std::size_t r = shape.size();
  AttentionOperand place{value, 0, {}, strides[r - 2]};
  bool packed = attention_attrs::writes_packed(n);
  if (!packed && !attention_attrs::writes_token_major(n)) {
    place.batch_stride.assign(strides.begin(), strides.end() - 2); // [lead..., H, rows, cols]
    return place;
  }
  // Token-major [lead..., T, H, C], or packed [lead..., T, 3, H, C].
  std::size_t t_dim = packed ? r - 4 : r - 3;
  place.batch_stride.assign(strides.begin(), strides.begin() + static_cast<std::ptrdiff_t>(t_dim));
  place.batch_stride.push_back(strides[r - 2]);
  place.row_stride = strides[t_dim];
  place.offset = packed ? part * strides[r - 3] : 0;
  place.contiguous = false;
  return place;
}

} // namespace

AttentionLayout attention_layout(const FusionPlan& plan, const Kernel& kernel) {
  const Graph& g = *plan.graph;
  const Node& root = g.node(kernel.root);
  AttentionLayout l = attention_layout(g, root);
  auto is_buffer = [&](ValueId id) { return bool(plan.materialized[id]); };
  for (std::size_t i = 0; i < root.inputs.size(); ++i) {
    ValueId operand = root.inputs[i];
    AttentionOperand& o = l.operands[i];
    o.buffer = plan.view_of[operand];
    if (plan.materialized[operand] || o.buffer != operand) continue; // a buffer, or a reshape
    std::optional<StridedView> view = attention_operand_view(g, operand, is_buffer);
    if (!view)
      throw std::logic_error("attention reads operand " + std::to_string(i) + " (%" +
                             std::to_string(operand) + ") through views it cannot stride");
    o.buffer = plan.view_of[view->buffer]; // a reshape of a buffer has its element order
    o.offset = view->offset;
    o.batch_stride.assign(view->strides.begin(), view->strides.end() - 2);
    o.row_stride = view->strides[view->strides.size() - 2];
    o.contiguous = view->offset == 0 && view->strides == contiguous_strides(g.type(operand).shape);
  }
  for (ValueId out : kernel.outputs()) {
    const Node& n = g.node(out);
    if (n.op == OpId::fused_attention) l.o_result = result_place(g, out, 0);
    if (n.op != OpId::fused_attention_grad) continue;
    bool packed = attention_attrs::writes_packed(n);
    if (packed || n.attrs.ints[0] == attention_attrs::grad_q)
      l.dq_result = result_place(g, out, attention_attrs::grad_q);
    if (packed || n.attrs.ints[0] == attention_attrs::grad_k)
      l.dk_result = result_place(g, out, attention_attrs::grad_k);
    if (packed || n.attrs.ints[0] == attention_attrs::grad_v)
      l.dv_result = result_place(g, out, attention_attrs::grad_v);
  }
  return l;
}

int64_t AttentionLayout::mask_offset(int64_t batch) const {
  int64_t offset = 0;
  for (std::size_t i = batch_dims.size(); i-- > 0;) {
    offset += (batch % batch_dims[i]) * mask_batch_stride[i];
    batch /= batch_dims[i];
  }
  return offset;
}

} // namespace sinter
