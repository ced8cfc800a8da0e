// jit/interp/interpreter.hpp — the float64 reference interpreter: the oracle for every backend
#pragma once
#include "jit/ir/graph.hpp"
#include "ops/registry.hpp"

#include <span>
#include <vector>

namespace sinter {

/// Evaluates a graph of primitives in float64 (casts round to their target type).
/// `inputs` follow graph.inputs(); returns one tensor per graph output.
/// Throws std::invalid_argument for a wrong input count or shape, or a composite node
/// (run the `lower` pass first).
std::vector<F64Tensor> interpret(const Graph& graph, std::span<const F64Tensor> inputs);

} // namespace sinter
