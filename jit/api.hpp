// jit/api.hpp — the one door from dsl/ into the compiler: build a Graph, compile it, run it
#pragma once
#include "jit/codegen/kernel_library.hpp"
#include "jit/passes/passes.hpp"
#include "jit/runtime/host_tensor.hpp"
#include "jit/runtime/memory_plan.hpp"
#include "ops/registry.hpp"
#include "ops/value.hpp"

#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace sinter {

class Context;
class CpuExecutable;

/// Where a compiled graph runs.
enum class Backend {
  cpu,         ///< fused kernels through LLVM ORC, GEMMs through OpenBLAS (the default)
  interpreter, ///< the float64 reference interpreter (slow; the oracle of the tests)
};

/// `SINTER_BACKEND=cpu|interpreter`, default cpu; a bad value → std::invalid_argument.
Backend backend_from_environment();

/// A traced graph after the pass pipeline (autodiff when asked, lower, simplify, cse), fused
/// and compiled for its backend.
class CompiledGraph {
public:
  CompiledGraph(Graph traced, std::optional<AutodiffOptions> autodiff,
                Backend backend = backend_from_environment(), Context* context = nullptr);
  ~CompiledGraph();
  CompiledGraph(CompiledGraph&&) noexcept;
  CompiledGraph& operator=(CompiledGraph&&) noexcept;

  /// The optimised graph that runs.
  const Graph& graph() const { return graph_; }
  Backend backend() const { return backend_; }
  /// Runs one step; outputs follow graph().outputs().
  /// Throws std::invalid_argument naming the input whose dtype or shape is wrong.
  std::vector<HostTensor> run(std::span<const HostTensor> inputs) const;
  /// The same, writing into `outputs` (resized to the right types when they are not).
  void run_into(std::span<const HostTensor> inputs, std::span<HostTensor> outputs) const;
  void run_into(std::span<const HostTensor* const> inputs, std::span<HostTensor> outputs) const;

  /// Memory the step needs (CPU backend): `memory_plan().peak_bytes()`.
  const MemoryPlan& memory_plan() const;
  /// Kernel counts and compile time (CPU backend; zeros on the interpreter).
  const CompileReport& compile_report() const;
  /// Wall time of the pipeline and compilation, in seconds.
  double compile_seconds() const { return compile_seconds_; }

private:
  void check_inputs(std::span<const HostTensor* const> inputs) const;

  Graph graph_;
  Backend backend_;
  std::unique_ptr<CpuExecutable> cpu_;
  double compile_seconds_ = 0;
};

/// One line on stderr unless SINTER_LOG=0: compile and recompile reports.
void log_line(const std::string& line);

F64Tensor to_f64(const HostTensor& t);
HostTensor from_f64(const F64Tensor& t, DType dtype);

} // namespace sinter

// The training runtime, checkpoints and data loading are part of the same façade.
#include "jit/data/fashion_mnist.hpp"
#include "jit/data/loader.hpp"
#include "jit/data/synthetic.hpp"
#include "jit/data/text.hpp"
#include "jit/runtime/checkpoint.hpp"
#include "jit/runtime/train_step.hpp"
