// jit/dist/collective_launch.cpp — collective kernels through a communicator
#include "jit/dist/collective_launch.hpp"

#include "ops/op_id.hpp"

#include <stdexcept>
#include <string>

namespace sinter {

int64_t collective_ranks(const Graph& graph) {
  int64_t ranks = 0;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    if (!is_collective(n.op)) continue;
    if (ranks != 0 && n.attrs.ints[0] != ranks)
      throw std::invalid_argument("sinter: a graph's collectives were built for " +
                                  std::to_string(ranks) + " and " +
                                  std::to_string(n.attrs.ints[0]) + " ranks");
    ranks = n.attrs.ints[0];
  }
  return ranks;
}

void check_collective_ranks(int64_t built_for, const Communicator& communicator) {
  if (built_for == 0 || built_for == communicator.size()) return;
  throw std::invalid_argument(
      "sinter: this step was built for " + std::to_string(built_for) +
      " ranks but runs in a job of " + std::to_string(communicator.size()) +
      " (its collectives' shapes depend on the world size: compile the step in the job that "
      "runs it)");
}

Communicator::Pending start_collective(Communicator& communicator, const Graph& graph,
                                       const Kernel& kernel, const void* send, void* recv) {
  const Node& n = graph.node(kernel.root);
  DType type = n.type.dtype;
  int64_t out = numel(n.type.shape);
  switch (n.op) {
  case OpId::all_reduce: return communicator.start_all_reduce(send, recv, out, type, ReduceOp::sum);
  case OpId::reduce_scatter:
    return communicator.start_reduce_scatter(send, recv, out, type, ReduceOp::sum);
  case OpId::all_gather:
    return communicator.start_all_gather(send, recv, numel(graph.type(n.inputs[0]).shape), type);
  case OpId::broadcast_from:
    return communicator.start_broadcast(send, recv, out, type, static_cast<int>(n.attrs.ints[1]));
  default: break;
  }
  throw std::logic_error("sinter: " + std::string(op_name(n.op)) + " is not a collective");
}

} // namespace sinter
