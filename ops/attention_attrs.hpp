// ops/attention_attrs.hpp — the fused attention primitives' integer attributes: the layout a
// forward writes its result in, and which gradients a backward node makes
#pragma once
#include "jit/ir/graph.hpp"
#include "ops/value.hpp"

#include <cstdint>
#include <span>
#include <utility>

namespace sinter::attention_attrs {

/// fused_attention's ints: {} writes the result head-major, [..., H, Tq, Dv] like q; {token_major}
/// writes it [..., Tq, H, Dv] (q's last batch dim swapped with its rows), the layout the merge of
/// the heads before the output projection reads without a copy. Needs q of rank 3 or more.
inline constexpr int64_t token_major = 1;

/// fused_attention_grad's ints = {which}: the gradient of q, k or v, each shaped like its
/// operand, or `packed`: all three token-major in one [..., T, 3, H, D] value (q, k and v of one
/// shape [..., H, T, D]), which is the gradient of the packed projection they were split from.
inline constexpr int64_t grad_q = 0, grad_k = 1, grad_v = 2, grad_packed = 3;

/// The attributes' layout, for the op they belong to (fused_attention's and the gradient's ints
/// mean different things: a gradient of k has ints = {1} too).
inline bool writes_token_major(const Attrs& a) {
  return a.ints.size() == 1 && a.ints[0] == token_major;
}
inline bool writes_packed(const Attrs& a) { return a.ints.size() == 1 && a.ints[0] == grad_packed; }
/// Whether node `n` is a forward writing token-major, or a gradient writing all three packed.
inline bool writes_token_major(const Node& n) {
  return n.op == OpId::fused_attention && writes_token_major(n.attrs);
}
inline bool writes_packed(const Node& n) {
  return n.op == OpId::fused_attention_grad && writes_packed(n.attrs);
}

/// `shape` [..., H, T, C] as [..., T, H, C].
inline Shape token_major_shape(Shape shape) {
  std::swap(shape[shape.size() - 3], shape[shape.size() - 2]);
  return shape;
}

/// The permutation between the head-major and the token-major layout of a rank-`rank` value
/// (its own inverse).
inline std::vector<int64_t> heads_rows_swap(std::size_t rank) {
  std::vector<int64_t> perm(rank);
  for (std::size_t i = 0; i < rank; ++i)
    perm[i] = static_cast<int64_t>(i);
  std::swap(perm[rank - 3], perm[rank - 2]);
  return perm;
}

/// Three head-major gradients [..., H, T, D] (q's, k's and v's) laid out as the packed
/// [..., T, 3, H, D] one gradient node writes: each token-major, joined along a new dim.
Value pack_gradients(std::span<const Value> grads);

} // namespace sinter::attention_attrs
