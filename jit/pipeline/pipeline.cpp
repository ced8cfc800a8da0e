// jit/pipeline/pipeline.cpp — runs the named passes, verify() after each, SINTER_DUMP output
#include "jit/pipeline/pipeline.hpp"

#include "jit/runtime/phase_timer.hpp"

#include "ops/registry.hpp"

#include <cstdlib>
#include <iostream>
#include <sstream>

namespace sinter {

DumpSelection::DumpSelection(std::string spec) {
  std::stringstream ss(spec);
  std::string name;
  while (std::getline(ss, name, ','))
    if (!name.empty()) names_.push_back(name);
}

DumpSelection DumpSelection::from_environment() {
  const char* spec = std::getenv("SINTER_DUMP");
  return DumpSelection(spec ? spec : "");
}

bool DumpSelection::wants(std::string_view pass) const {
  for (const std::string& n : names_)
    if (n == pass || n == "all") return true;
  return false;
}

Graph Pipeline::run(Graph graph, const DumpSelection& dump, std::ostream& dump_to) const {
  verify(graph);
  if (dump.wants("trace")) dump_to << "// sinter IR after trace\n" << graph.print();
  for (const Pass& pass : passes_) {
    PhaseTimer timer(pass.name);
    graph = pass.run(graph);
    verify(graph);
    if (dump.wants(pass.name))
      dump_to << "// sinter IR after " << pass.name << "\n" << graph.print();
  }
  return graph;
}

Graph Pipeline::run(Graph graph) const {
  return run(std::move(graph), DumpSelection::from_environment(), std::cerr);
}

Pipeline Pipeline::standard(std::optional<AutodiffOptions> autodiff_options) {
  std::vector<Pass> passes;
  if (autodiff_options)
    passes.push_back(
        {"autodiff", [opts = *autodiff_options](const Graph& g) { return autodiff(g, opts); }});
  passes.push_back({"lower", lower});
  passes.push_back({"simplify", simplify});
  passes.push_back({"cse", cse});
  return Pipeline(std::move(passes));
}

} // namespace sinter
