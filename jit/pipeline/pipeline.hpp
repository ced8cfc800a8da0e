// jit/pipeline/pipeline.hpp — a flat, named list of passes, verified and optionally dumped
#pragma once
#include "jit/passes/passes.hpp"

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace sinter {

struct Pass {
  std::string name;
  std::function<Graph(const Graph&)> run;
};

/// Which IR dumps to print: pass names, "trace" (the graph as traced) or "all".
/// Parsed from SINTER_DUMP (comma-separated) unless given explicitly.
class DumpSelection {
public:
  static DumpSelection from_environment();
  explicit DumpSelection(std::string spec = "");
  bool wants(std::string_view pass) const;

private:
  std::vector<std::string> names_;
};

class Pipeline {
public:
  explicit Pipeline(std::vector<Pass> passes) : passes_(std::move(passes)) {}

  /// Runs every pass in order, verifying after each and dumping where selected.
  Graph run(Graph graph, const DumpSelection& dump, std::ostream& dump_to) const;
  Graph run(Graph graph) const;
  const std::vector<Pass>& passes() const { return passes_; }

  /// autodiff (when options are given) → lower → simplify → cse.
  static Pipeline standard(std::optional<AutodiffOptions> autodiff_options);

private:
  std::vector<Pass> passes_;
};

} // namespace sinter
