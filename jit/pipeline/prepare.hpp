// jit/pipeline/prepare.hpp — a backend's graph stages, fuse and the memory plan: the one way
// every backend, planner, emulator and test turns an optimised graph into kernels and buffers
#pragma once
#include "jit/passes/fuse.hpp"
#include "jit/pipeline/stage.hpp"
#include "jit/runtime/memory_plan.hpp"

#include <memory>
#include <vector>

namespace sinter {

/// What a backend does to an optimised graph before it generates code: its own graph stages
/// (decompose-attention, small-matmuls, rematerialize) and how it fuses.
struct BackendGraphStages {
  std::vector<Stage> stages;
  FusionOptions fusion;
  bool fuses = true; ///< false: the backend runs the graph as it is (the interpreter)
};

/// A graph ready for a backend: the graph it runs, its kernels and its buffers.
struct Prepared {
  std::unique_ptr<Graph> graph; ///< stable address: the fusion plan points into it
  FusionPlan fusion;
  MemoryPlan memory;
};

/// Runs the backend's graph stages, then `fuse` and `memory` (each through `run`).
Prepared prepare(Graph optimized, const BackendGraphStages& backend, CompileRun& run);

} // namespace sinter
