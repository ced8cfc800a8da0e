// jit/api.hpp — the one door from dsl/ into the compiler: build a Graph, compile it, run it
#pragma once
#include "jit/passes/passes.hpp"
#include "jit/runtime/host_tensor.hpp"
#include "ops/registry.hpp"
#include "ops/value.hpp"

#include <optional>
#include <span>
#include <vector>

namespace sinter {

/// A traced graph after the pass pipeline (autodiff when asked, lower, simplify, cse).
class CompiledGraph {
public:
  CompiledGraph(Graph traced, std::optional<AutodiffOptions> autodiff);

  /// The optimised graph that runs.
  const Graph& graph() const { return graph_; }
  /// Runs on the float64 reference interpreter; outputs follow graph().outputs().
  /// Throws std::invalid_argument naming the input whose dtype or shape is wrong.
  std::vector<HostTensor> run(std::span<const HostTensor> inputs) const;

private:
  Graph graph_;
};

F64Tensor to_f64(const HostTensor& t);
HostTensor from_f64(const F64Tensor& t, DType dtype);

} // namespace sinter
