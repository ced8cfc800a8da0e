// jit/backend/cpu/cpu_executable.hpp — a compiled step on the CPU: kernels, arena, launches
#pragma once
#include "jit/backend/backends.hpp"
#include "jit/backend/cpu/kernel_library.hpp"
#include "jit/backend/cpu/thread_pool.hpp"
#include "jit/backend/device.hpp"
#include "jit/backend/executable.hpp"
#include "jit/pipeline/prepare.hpp"
#include "jit/profile/profiler.hpp"

#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <vector>

namespace sinter {

/// A kernel that only joins stored buffers along an axis (a gradient bucket being packed): the
/// CPU copies it block by block instead of computing it element by element.
struct ConcatCopy {
  std::vector<ValueId> sources;     ///< buffers, in operand order
  std::vector<int64_t> block_bytes; ///< per source: its part of one outer index
  int64_t outer = 1;                ///< elements of the dims before the axis
};

/// A kernel whose every output picks rows of a stored table by one stored index buffer (the
/// gathered operands of in-step sifting): the CPU copies whole rows instead of computing the
/// gather element by element. Indices out of range read the nearest row, as the generated
/// gather does.
struct GatherCopy {
  ValueId indices = 0; ///< the index buffer
  int64_t count = 0;   ///< indices (rows of each output)
  struct Part {
    ValueId table = 0, out = 0;
    int64_t table_rows = 0, row_bytes = 0;
  };
  std::vector<Part> parts;
};

class CpuExecutable final : public Executable {
public:
  /// Fetches or compiles every kernel of a prepared graph (cpu_graph_stages, fused and
  /// planned); the `kernels` stage goes through `run`.
  CpuExecutable(Prepared prepared, KernelLibrary& library, ThreadPool& pool, CompileRun& run);
  /// Prepares an optimised graph itself (no dumps), then as above.
  CpuExecutable(const Graph& optimized, KernelLibrary& library, ThreadPool& pool);

  /// Runs one step. Inputs follow graph().inputs() and must already have the right types.
  /// Not re-entrant: concurrent calls on one executable are serialised (they share the arena).
  std::vector<HostTensor> run(std::span<const HostTensor> inputs) const;
  /// The same, writing into `outputs` (one per graph output, already of the right types), so a
  /// loop of steps allocates nothing.
  void run_into(std::span<const HostTensor> inputs, std::span<HostTensor> outputs) const;
  /// The same with inputs by pointer (callers that keep them in several places).
  void run_into(std::span<const HostTensor* const> inputs,
                std::span<HostTensor> outputs) const override;

  const Graph& graph() const { return *graph_; }
  const FusionPlan& fusion() const { return fusion_; }
  const MemoryPlan& memory_plan() const override { return memory_; }
  const CompileReport& report() const override { return report_; }
  const FusionPlan* fusion_plan() const override { return &fusion_; }

private:
  CpuExecutable(const Graph& optimized, KernelLibrary& library, ThreadPool& pool, CompileRun&& run);

  std::unique_ptr<Graph> graph_; // stable address: the fusion plan points at it
  FusionPlan fusion_;
  MemoryPlan memory_;
  ThreadPool& pool_;
  std::vector<KernelEntry> entries_; ///< per kernel; null for GEMMs, attention, collectives
  std::vector<std::optional<ConcatCopy>> copies_;  ///< per kernel
  std::vector<std::optional<GatherCopy>> gathers_; ///< per kernel
  /// Per kernel index (and one past the last): the collectives to wait for before it runs.
  std::vector<std::vector<std::size_t>> waits_before_;
  int64_t collective_ranks_ = 0; ///< the ranks its collectives were built for (0: none)
  CompileReport report_;
  uint64_t profile_id_ = profile::new_program_id(); ///< its kernel table in a profile
  mutable std::mutex run_mutex_;
  /// The arena's bytes, aligned to MemoryPlan::alignment: freed by the aligned delete[] that
  /// matches the aligned new[] (a plain delete[] is undefined).
  struct AlignedDelete {
    void operator()(std::byte* p) const {
      ::operator delete[](p, std::align_val_t(MemoryPlan::alignment));
    }
  };
  mutable std::unique_ptr<std::byte[], AlignedDelete> arena_;
};

/// The CPU's entry in the backend table. Graph stages: `decompose-attention` under
/// SINTER_ATTENTION=decomposed, then `small-matmuls` (small batched matmuls as loops that
/// fuse); fused with row kernels and sibling reductions. Kernels from the context's library,
/// run on its thread pool; the memory plan counts the caller's inputs, and free memory is the
/// host's.
extern const BackendEntry cpu_backend;

} // namespace sinter
