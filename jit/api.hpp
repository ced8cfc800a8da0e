// jit/api.hpp — the one door from dsl/ into the compiler: build a Graph, compile it, run it
#pragma once
#include "jit/backend/device.hpp"
#include "jit/passes/passes.hpp"
#include "jit/pipeline/stage.hpp"
#include "jit/profile/numerics_check.hpp"
#include "jit/profile/profiler.hpp"
#include "jit/runtime/compile_report.hpp"
#include "jit/runtime/host_tensor.hpp"
#include "jit/runtime/memory_plan.hpp"
#include "ops/registry.hpp"
#include "ops/value.hpp"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sinter {

class Communicator;

class Context;
class Executable;
class Pipeline;

/// Where graphs compile when no device is named: set_default_device(), else `SINTER_DEVICE`,
/// else `SINTER_BACKEND` (cpu|interpreter), else cpu. Bad values → std::invalid_argument.
Device default_device();
void set_default_device(Device device);
/// default_device().backend (kept for callers that only choose between cpu and interpreter).
Backend backend_from_environment();

/// A traced graph after the pass pipeline (autodiff when asked, lower, simplify, cse), fused
/// and compiled for its backend.
class CompiledGraph {
public:
  /// `traced_ms`: how long the caller took to trace it (the compile's `trace` stage);
  /// `label`: what the stage list and profiles call the program.
  CompiledGraph(Graph traced, std::optional<AutodiffOptions> autodiff,
                Device device = default_device(), Context* context = nullptr, double traced_ms = 0,
                const std::string& label = "program");
  /// A graph whose earlier stages ran in `run` (a training step's trace, autocast, autodiff,
  /// update): `stages`, then the backend's, in the same compile.
  CompiledGraph(Graph graph, const Pipeline& stages, CompileRun& run, Device device,
                Context* context = nullptr);
  ~CompiledGraph();
  CompiledGraph(CompiledGraph&&) noexcept;
  CompiledGraph& operator=(CompiledGraph&&) noexcept;

  /// The optimised graph that runs.
  const Graph& graph() const { return graph_; }
  Backend backend() const { return device_.backend; }
  const Device& device() const { return device_; }
  /// Runs one step; outputs follow graph().outputs().
  /// Throws std::invalid_argument naming the input whose dtype or shape is wrong.
  std::vector<HostTensor> run(std::span<const HostTensor> inputs) const;
  /// The same, writing into `outputs` (resized to the right types when they are not).
  void run_into(std::span<const HostTensor> inputs, std::span<HostTensor> outputs) const;
  void run_into(std::span<const HostTensor* const> inputs, std::span<HostTensor> outputs) const;

  /// Declares (input index, output index) pairs whose output is the next run's input, such
  /// as a training step's parameters and optimizer state. On CUDA they then stay on the GPU
  /// between runs: those outputs come back deferred (fetched from the device on first access,
  /// see HostTensor::defer) and are not uploaded again while unwritten. No effect elsewhere.
  void set_carried(std::span<const std::pair<std::size_t, std::size_t>> input_from_output);
  /// Declares inputs that every run reads and none writes, such as a distillation teacher's
  /// weights. On CUDA each keeps one device copy, uploaded again only when the host tensor
  /// changed (HostTensor::stamp). No effect elsewhere.
  void set_resident(std::span<const std::size_t> inputs);
  /// What profiles call the program (`train step`, `eval`; default `program`).
  void set_label(std::string label);
  /// The ranks the graph's collectives (all_reduce, ...) run between; default sinter::world().
  /// A graph built for N ranks runs only in a job of N (docs/distributed.md).
  void set_communicator(Communicator& communicator);

  /// Memory the step needs (CPU and CUDA): `memory_plan().peak_bytes()`.
  const MemoryPlan& memory_plan() const;
  /// Kernel counts and compile time (CPU and CUDA; zeros on the interpreter).
  const CompileReport& compile_report() const;
  /// The kernels the backend runs, as SINTER_DUMP=fuse prints them (CPU and CUDA; null on
  /// the interpreter).
  const FusionPlan* fusion_plan() const;
  /// Wall time of the pipeline and compilation, in seconds (with the stages that ran before
  /// the constructor in its CompileRun).
  double compile_seconds() const { return compile_seconds_; }
  /// Every stage of its compile, in order, with its time.
  const std::vector<StageTime>& stage_times() const { return stage_times_; }

private:
  void compile(Graph graph, const Pipeline& stages, CompileRun& run, Context* context);
  void check_inputs(std::span<const HostTensor* const> inputs) const;

  Graph graph_;
  Device device_;
  std::unique_ptr<Executable> executable_;
  double compile_seconds_ = 0;
  std::vector<StageTime> stage_times_;
};

/// Memory free for new steps on `device` now, in bytes: the GPU's free memory (cuMemGetInfo),
/// or on the CPU and the interpreter the host's available memory (MemAvailable).
int64_t free_memory(const Device& device = default_device());

/// One line on stderr unless SINTER_LOG=0: compile and recompile reports.
void log_line(const std::string& line);

F64Tensor to_f64(const HostTensor& t);
HostTensor from_f64(const F64Tensor& t, DType dtype);

} // namespace sinter
