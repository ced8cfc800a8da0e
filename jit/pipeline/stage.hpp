// jit/pipeline/stage.hpp — a stage of a compile: named, verified after, timed, dumped by name
#pragma once
#include "jit/ir/graph.hpp"

#include <chrono>
#include <cstddef>
#include <functional>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sinter {

/// One entry of the compile's order: a stage's name (what SINTER_DUMP takes) and what it does.
struct StageInfo {
  std::string_view name;
  std::string_view does;
};

/// Every stage a compile can have, graph stages then backend stages, in the order they run
/// (jit/pipeline/stage.cpp). A compile runs those its program and options ask for.
std::span<const StageInfo> stage_order();
/// The order as text, a stage a line (`sinter stages` prints it; docs show it).
std::string stage_table();
/// The position of `name` in stage_order(); std::logic_error for a name it does not list.
std::size_t stage_position(std::string_view name);

/// A stage that turns the graph into the next graph.
struct Stage {
  std::string_view name; ///< one of stage_order()
  std::function<Graph(Graph)> run;
};

/// Which stages to dump: stage names, `list` (the stages a compile ran, in order, with their
/// times) or `all`. Parsed from SINTER_DUMP (comma-separated) unless given explicitly.
class DumpSelection {
public:
  static DumpSelection from_environment();
  explicit DumpSelection(std::string spec = "");
  bool wants(std::string_view stage) const;
  bool wants_list() const;

private:
  std::vector<std::string> names_;
};

/// A stage's wall time in one compile.
struct StageTime {
  std::string_view name;
  double ms = 0;
};

/// One compile as it goes: runs its stages in the listed order, verifying each graph stage's
/// result, timing every stage (SINTER_TIME_PHASES=1 prints `sinter: phase <stage> <ms> ms`)
/// and dumping those SINTER_DUMP names. At the end, SINTER_DUMP=list prints what ran.
class CompileRun {
public:
  /// `program` names the compile in the list (`train step`, `program`); `planned` marks a
  /// compile that only plans memory (dumps say `(planned)`).
  explicit CompileRun(std::string program = "program", bool planned = false,
                      DumpSelection dump = DumpSelection::from_environment(),
                      std::ostream* dump_to = nullptr /* stderr */);
  CompileRun(const CompileRun&) = delete;
  CompileRun& operator=(const CompileRun&) = delete;

  /// Runs a graph stage on `graph`: times it, verifies its result, dumps it when asked.
  Graph run(const Stage& stage, Graph graph);
  /// Runs a stage that makes something other than a graph (the fusion plan, the memory plan,
  /// kernels), timed, and returns what `work` returns; its dump is the caller's (dump()).
  template <class Work> auto timed(std::string_view stage, Work&& work) -> decltype(work()) {
    Timing timing(*this, stage);
    return work();
  }
  /// Records a graph made before this compile began (a DSL trace, taking `ms`) as stage
  /// `stage`: listed, verified and dumped like the others.
  void given(std::string_view stage, const Graph& graph, double ms);
  /// Writes a plan's text (`fusion: ...`, `memory plan: ...`) as the dump of `stage` when
  /// SINTER_DUMP names it; `text` is called only then (printing a plan is not free).
  void dump(std::string_view stage, const std::function<std::string()>& text);
  bool wants_dump(std::string_view stage) const { return dump_.wants(stage); }

  /// Every stage run so far, in order.
  const std::vector<StageTime>& times() const { return times_; }
  double total_ms() const;
  /// The end of the compile for `device`: with SINTER_DUMP=list, prints its stages.
  void finish(std::string_view device);
  const std::string& program() const { return program_; }

private:
  class Timing {
  public:
    Timing(CompileRun& run, std::string_view stage);
    ~Timing();
    Timing(const Timing&) = delete;
    Timing& operator=(const Timing&) = delete;

  private:
    CompileRun& run_;
    std::size_t position_;
    std::chrono::steady_clock::time_point start_;
  };
  /// The stage's position in the order, checked against the stage before it.
  std::size_t enter(std::string_view stage);
  void dump_graph(std::string_view stage, const Graph& graph);
  void record(std::size_t position, double ms);

  std::string program_;
  bool planned_;
  DumpSelection dump_;
  std::ostream& out_;
  std::vector<StageTime> times_;
  std::size_t position_ = 0; ///< stage_position of the latest stage: stages run in order
  bool finished_ = false;
};

/// `name ms, name ms, name ms`: the `count` slowest stages of `times` (the compile line's tail).
std::string slowest_stages(std::span<const StageTime> times, std::size_t count);

} // namespace sinter
