// jit/pipeline/pipeline.hpp — an ordered list of graph stages, run through one CompileRun
#pragma once
#include "jit/passes/passes.hpp"
#include "jit/pipeline/stage.hpp"

#include <iosfwd>
#include <optional>
#include <vector>

namespace sinter {

class Pipeline {
public:
  explicit Pipeline(std::vector<Stage> stages = {}) : stages_(std::move(stages)) {}

  /// Runs every stage in order through `run` (verified, timed, dumped where selected).
  Graph run(Graph graph, CompileRun& run) const;
  /// The same in a compile of its own, dumping what `dump` selects to `dump_to`.
  Graph run(Graph graph, const DumpSelection& dump, std::ostream& dump_to) const;
  /// The same, with SINTER_DUMP's selection, to stderr.
  Graph run(Graph graph) const;
  const std::vector<Stage>& stages() const { return stages_; }

  /// This pipeline with `stage` at its place in stage_order().
  Pipeline with(Stage stage) &&;

  /// autodiff (when options are given) → lower → simplify → cse.
  static Pipeline standard(std::optional<AutodiffOptions> autodiff_options);

private:
  std::vector<Stage> stages_;
};

} // namespace sinter
