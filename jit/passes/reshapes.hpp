// jit/passes/reshapes.hpp — a value seen through the reshapes (or the widening) that produced it
#pragma once
#include "jit/ir/graph.hpp"

namespace sinter {

/// `v` with the reshapes that produced it taken off: a reshape keeps row-major element order,
/// so two values with the same source hold the same elements in the same order.
inline ValueId through_reshapes(const Graph& g, ValueId v) {
  while (g.node(v).op == OpId::reshape)
    v = g.node(v).inputs[0];
  return v;
}

/// What `v` widens when it is a cast from bf16 or f16 up to f32 (mixed precision's f32 sums of
/// 16-bit values), else `v`.
inline ValueId before_widening(const Graph& g, ValueId v) {
  const Node& n = g.node(v);
  if (n.op != OpId::cast || g.type(v).dtype != DType::f32) return v;
  DType low = g.type(n.inputs[0]).dtype;
  return low == DType::bf16 || low == DType::f16 ? n.inputs[0] : v;
}

} // namespace sinter
