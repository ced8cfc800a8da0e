// jit/pipeline/stage.cpp — the order of every stage of a compile, and CompileRun: verify, time,
// dump and list each stage
#include "jit/pipeline/stage.hpp"

#include "jit/settings.hpp"
#include "ops/registry.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <sstream>
#include <stdexcept>

namespace sinter {
namespace {

// The whole compile on one screen: graph stages, then the backend's. A stage not listed here
// cannot run, and stages run in this order (CompileRun checks both).
constexpr StageInfo order[] = {
    {"trace", "the model's function run on symbolic tensors of the batch's types"},
    {"sift", "in-step sifting: every row's loss recorded, rows drawn, their mean loss trained"},
    {"autocast", "mixed precision: each op computed in the precision its rule asks for"},
    {"loss-scale", "fp16: the loss times the loss scale, which autodiff differentiates"},
    {"working-copies", "mixed precision: weights read as low-precision copies the update writes"},
    {"autodiff", "reverse mode: the gradient of the loss appended to the graph"},
    {"merge-gradients", "mixed precision: a weight's gradient plus its working copy's, in f32"},
    {"loss-all-reduce", "data parallel: the reported loss averaged over the ranks"},
    {"update", "the optimizer; data parallel: gradients reduced in buckets, ZeRO shards"},
    {"lower", "composite ops expanded into primitives"},
    {"share-taken-rows", "in-step sifting: the drawn rows read the batch's forward values"},
    {"simplify", "algebraic simplification and constant folding"},
    {"cse", "common subexpressions merged, dead code dropped"},
    {"decompose-attention", "attention as GEMMs and a softmax where no fused kernel takes it"},
    {"small-matmuls", "cpu: small batched matmuls as loops fused with their neighbours"},
    {"attention-views",
     "attention reads and writes the heads where they lie (cuda); cpu: head-major results"},
    {"split-reductions", "cuda: long column reductions as partial sums over row groups, then one"},
    {"rematerialize", "cuda: cheap values recomputed before the late GEMMs that read them, if "
                      "keeping them does not fit"},
    {"fuse", "kernels: fused loops, reductions, rows, GEMMs, attention, collectives"},
    {"memory", "every intermediate buffer placed in one arena; the peak"},
    {"buffers",
     "cuda: the arena, the outputs and the first input set (the second at the first run)"},
    {"launch-plan", "cuda: the GEMM epilogues cuBLASLt may absorb"},
    {"kernels", "each kernel from memory, the disk cache or code generation"},
    {"bind", "cuda: each launch bound to the first input set's buffers, cuBLASLt plans chosen"},
    {"plan", "cuda: each launch's predicted time on this GPU (the cost model) and the step's"},
};

bool time_phases() { return settings().time_phases; }

} // namespace

std::span<const StageInfo> stage_order() { return order; }

std::string stage_table() {
  std::string out;
  for (const StageInfo& stage : order) {
    char line[160];
    std::snprintf(line, sizeof line, "%-20.*s %.*s\n", static_cast<int>(stage.name.size()),
                  stage.name.data(), static_cast<int>(stage.does.size()), stage.does.data());
    out += line;
  }
  return out;
}

std::size_t stage_position(std::string_view name) {
  for (std::size_t i = 0; i < std::size(order); ++i)
    if (order[i].name == name) return i;
  throw std::logic_error("sinter: stage '" + std::string(name) +
                         "' is not in jit/pipeline/stage.cpp's order");
}

DumpSelection::DumpSelection(std::string spec) {
  std::stringstream ss(spec);
  std::string name;
  while (std::getline(ss, name, ','))
    if (!name.empty()) names_.push_back(name);
}

DumpSelection DumpSelection::from_environment() {
  DumpSelection selection(settings().dump);
  static std::once_flag checked; // a misspelt stage would print nothing, silently
  std::call_once(checked, [&] {
    for (const std::string& name : selection.names_) {
      if (name == "all" || name == "list" ||
          std::any_of(std::begin(order), std::end(order),
                      [&](const StageInfo& s) { return s.name == name; }))
        continue;
      // `list` and `all` are choices too: `lst` means list, not cse.
      std::vector<std::string_view> choices{"list", "all"};
      for (const StageInfo& s : order)
        choices.push_back(s.name);
      std::string_view closest =
          closest_name(name, choices, [](std::string_view choice) { return choice; });
      std::fprintf(stderr,
                   "sinter: warning: SINTER_DUMP names '%s', which is no stage (did you mean "
                   "'%.*s'?); SINTER_DUMP=list prints the stages of each compile\n",
                   name.c_str(), static_cast<int>(closest.size()), closest.data());
    }
  });
  return selection;
}

bool DumpSelection::wants(std::string_view stage) const {
  for (const std::string& n : names_)
    if (n == stage || n == "all") return true;
  return false;
}

bool DumpSelection::wants_list() const {
  return std::find(names_.begin(), names_.end(), "list") != names_.end();
}

CompileRun::CompileRun(std::string program, bool planned, DumpSelection dump, std::ostream* dump_to)
    : program_(std::move(program)), planned_(planned), dump_(std::move(dump)),
      out_(dump_to ? *dump_to : std::cerr) {}

CompileRun::Timing::Timing(CompileRun& run, std::string_view stage)
    : run_(run), position_(run.enter(stage)), start_(std::chrono::steady_clock::now()) {}

CompileRun::Timing::~Timing() {
  run_.record(
      position_,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
}

std::size_t CompileRun::enter(std::string_view stage) {
  std::size_t at = stage_position(stage);
  if (!times_.empty() && at < position_)
    throw std::logic_error("sinter: stage '" + std::string(stage) + "' runs after '" +
                           std::string(order[position_].name) +
                           "', against the order in jit/pipeline/stage.cpp");
  position_ = at;
  return at;
}

void CompileRun::record(std::size_t position, double ms) {
  std::string_view stage = order[position].name;
  times_.push_back({stage, ms});
  if (time_phases())
    std::fprintf(stderr, "sinter: phase %.*s %.1f ms\n", static_cast<int>(stage.size()),
                 stage.data(), ms);
}

Graph CompileRun::run(const Stage& stage, Graph graph) {
  {
    Timing timing(*this, stage.name); // the check after a stage is part of its cost
    graph = stage.run(std::move(graph));
    verify(graph);
  }
  if (dump_.wants(stage.name)) dump_graph(stage.name, graph);
  return graph;
}

void CompileRun::given(std::string_view stage, const Graph& graph, double ms) {
  record(enter(stage), ms);
  verify(graph);
  if (dump_.wants(stage)) dump_graph(stage, graph);
}

void CompileRun::dump_graph(std::string_view stage, const Graph& graph) {
  out_ << "// sinter " << (planned_ ? "(planned) " : "") << "IR after " << stage << " (" << program_
       << ")\n"
       << graph.print();
}

void CompileRun::dump(std::string_view stage, const std::function<std::string()>& print) {
  if (!dump_.wants(stage)) return;
  const std::string text = print();
  out_ << "// sinter " << (planned_ ? "(planned) " : "") << text;
  if (!text.empty() && text.back() != '\n') out_ << '\n';
}

double CompileRun::total_ms() const {
  double ms = 0;
  for (const StageTime& t : times_)
    ms += t.ms;
  return ms;
}

void CompileRun::finish(std::string_view device) {
  if (finished_ || !dump_.wants_list()) return;
  finished_ = true;
  std::ostringstream out;
  out << "// sinter " << (planned_ ? "(planned) " : "") << "stages of " << program_ << " on "
      << device << ", in order (SINTER_DUMP=<stage> prints one):\n";
  for (const StageTime& t : times_) {
    char line[160];
    const StageInfo& info = order[stage_position(t.name)];
    std::snprintf(line, sizeof line, "//   %-20.*s %9.1f ms  %.*s\n",
                  static_cast<int>(t.name.size()), t.name.data(), t.ms,
                  static_cast<int>(info.does.size()), info.does.data());
    out << line;
  }
  out_ << out.str();
}

std::string slowest_stages(std::span<const StageTime> times, std::size_t count) {
  std::vector<StageTime> sorted;
  // A stage that ran several times (two programs) counts once, with its summed time.
  for (const StageTime& t : times) {
    auto same = std::find_if(sorted.begin(), sorted.end(),
                             [&](const StageTime& s) { return s.name == t.name; });
    if (same == sorted.end())
      sorted.push_back(t);
    else
      same->ms += t.ms;
  }
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const StageTime& a, const StageTime& b) { return a.ms > b.ms; });
  std::string out;
  for (std::size_t i = 0; i < std::min(count, sorted.size()); ++i) {
    char part[64];
    std::snprintf(part, sizeof part, "%s%.*s %.1f ms", i ? ", " : "",
                  static_cast<int>(sorted[i].name.size()), sorted[i].name.data(), sorted[i].ms);
    out += part;
  }
  return out;
}

} // namespace sinter
