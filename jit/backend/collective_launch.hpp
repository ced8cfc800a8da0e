// jit/backend/collective_launch.hpp — starting a collective kernel on host buffers through a
// communicator (the CPU backend, the GPU emulator)
#pragma once
#include "jit/passes/fuse.hpp"
#include "jit/runtime/communicator.hpp"

namespace sinter {

/// Throws std::invalid_argument when a collective of `graph` was built for another number of
/// ranks than `communicator` has (the step must be compiled for the job it runs in).
void check_collective_ranks(const Graph& graph, const Communicator& communicator);

/// Starts the collective `kernel` computes: `send` is its operand's buffer, `recv` its result's
/// (the same for an in-place sum or broadcast). Neither may be touched before the wait.
Communicator::Pending start_collective(Communicator& communicator, const Graph& graph,
                                       const Kernel& kernel, const void* send, void* recv);

} // namespace sinter
