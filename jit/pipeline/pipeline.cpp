// jit/pipeline/pipeline.cpp — runs a list of graph stages in order; the standard middle passes
#include "jit/pipeline/pipeline.hpp"

#include <algorithm>
#include <iostream>

namespace sinter {

Graph Pipeline::run(Graph graph, CompileRun& run) const {
  for (const Stage& stage : stages_)
    graph = run.run(stage, std::move(graph));
  return graph;
}

Graph Pipeline::run(Graph graph, const DumpSelection& dump, std::ostream& dump_to) const {
  CompileRun compile("program", false, dump, &dump_to);
  compile.given("trace", graph, 0);
  return run(std::move(graph), compile);
}

Graph Pipeline::run(Graph graph) const {
  return run(std::move(graph), DumpSelection::from_environment(), std::cerr);
}

Pipeline Pipeline::with(Stage stage) && {
  std::size_t at = stage_position(stage.name);
  auto place = std::find_if(stages_.begin(), stages_.end(),
                            [&](const Stage& s) { return stage_position(s.name) > at; });
  stages_.insert(place, std::move(stage));
  return std::move(*this);
}

Pipeline Pipeline::standard(std::optional<AutodiffOptions> autodiff_options) {
  std::vector<Stage> stages;
  if (autodiff_options)
    stages.push_back(
        {"autodiff", [opts = *autodiff_options](Graph g) { return autodiff(g, opts); }});
  stages.push_back({"lower", [](Graph g) { return lower(g); }});
  stages.push_back({"simplify", [](Graph g) { return simplify(g); }});
  stages.push_back({"cse", [](Graph g) { return cse(g); }});
  return Pipeline(std::move(stages));
}

} // namespace sinter
