// jit/dist/collective_launch.hpp — starting a collective kernel on host buffers through a
// communicator (the CPU backend, the GPU emulator)
#pragma once
#include "jit/dist/communicator.hpp"
#include "jit/passes/fuse.hpp"

namespace sinter {

/// The number of ranks `graph`'s collectives were built for (attrs.ints[0]; every one of a
/// graph agrees), or 0 when it has none. Executables read it once, when they are made.
int64_t collective_ranks(const Graph& graph);

/// Throws std::invalid_argument when a graph whose collectives were built for `built_for`
/// ranks (collective_ranks; 0: none) runs on `communicator` of another size: the step must be
/// compiled for the job it runs in.
void check_collective_ranks(int64_t built_for, const Communicator& communicator);

/// Starts the collective `kernel` computes: `send` is its operand's buffer, `recv` its result's
/// (the same for an in-place sum or broadcast). Neither may be touched before the wait.
Communicator::Pending start_collective(Communicator& communicator, const Graph& graph,
                                       const Kernel& kernel, const void* send, void* recv);

} // namespace sinter
