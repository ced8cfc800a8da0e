// jit/pipeline/prepare.cpp — prepare(): backend graph stages, then fuse, then the memory plan
#include "jit/pipeline/prepare.hpp"

#include "jit/pipeline/pipeline.hpp"

namespace sinter {

Prepared prepare(Graph optimized, const BackendGraphStages& backend, CompileRun& run) {
  Prepared out;
  out.graph = std::make_unique<Graph>(Pipeline(backend.stages).run(std::move(optimized), run));
  if (!backend.fuses) return out;
  out.fusion = run.timed("fuse", [&] { return fuse(*out.graph, backend.fusion); });
  run.dump("fuse", [&] { return out.fusion.print(); });
  out.memory = run.timed("memory", [&] { return MemoryPlan(out.fusion); });
  run.dump("memory", [&] { return out.memory.print(); });
  return out;
}

} // namespace sinter
