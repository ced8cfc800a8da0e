// jit/passes/reshapes.hpp — a value seen through the reshapes that produced it
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

} // namespace sinter
