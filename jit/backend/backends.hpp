// jit/backend/backends.hpp — the table of backends: how each compiles a graph, by name
#pragma once
#include "jit/backend/device.hpp"
#include "jit/backend/executable.hpp"
#include "jit/pipeline/prepare.hpp"

#include <memory>
#include <span>
#include <string_view>

namespace sinter {

class Context;

/// One backend's registration.
struct BackendEntry {
  Backend backend;
  std::string_view name; ///< what Device::parse accepts
  bool numbered;         ///< devices are NAME:N (N = 0, 1, ...), NAME alone meaning NAME:0
  /// The backend's graph stages for `optimized` on `device`, and how it fuses (what
  /// prepare_for runs before compile or plan_memory).
  BackendGraphStages (*graph_stages)(const Graph& optimized, const Device& device);
  /// Compiles a prepared graph for `device`; its stages (launch-plan, kernels) go through `run`.
  std::unique_ptr<Executable> (*compile)(Prepared prepared, const Device& device, Context& context,
                                         CompileRun& run);
  /// The memory running a prepared graph would take on `device`, planned without generating
  /// code, with input i kept as `keeping[i]` says (per_run where the span is shorter).
  StepMemory (*plan_memory)(const Prepared& prepared, const Device& device,
                            std::span<const InputKeeping> keeping);
  /// Memory free for a new step on `device` now: the GPU's free memory, or on the CPU the
  /// host's available memory (MemAvailable).
  int64_t (*free_memory)(const Device& device);
  /// Optional: `prepared` is the step planned at another shape bucket (nothing compiled), so
  /// that the backend can compile this bucket's kernels to serve both (null: nothing to do).
  void (*remember_shapes)(const Prepared& prepared, const Device& device) = nullptr;
};

/// SINTER_ATTENTION: `fused` (the default: each backend's fused attention kernels where it has
/// them; on CUDA the faster of cuDNN's and sinter's NVPTX kernels, timed at the first compile of
/// a shape), `cudnn` or `nvptx` (CUDA: that one where it takes the node), or `decomposed` (GEMMs
/// and a softmax with the scores in memory, to compare or to work around a kernel). Anything
/// else throws std::invalid_argument naming the accepted values.
enum class AttentionRequest { fused, cudnn, nvptx, decomposed };
AttentionRequest attention_requested();
/// attention_requested() is `decomposed`.
bool attention_decomposition_requested();

/// Every backend, in the order `sinter info` and error messages list them.
std::span<const BackendEntry* const> backends();
/// The host's available memory (MemAvailable in /proc/meminfo, else physical memory).
int64_t host_available_memory();
/// host_available_memory() as a BackendEntry::free_memory (the CPU's and the interpreter's).
int64_t host_free_memory(const Device& device);
/// The bytes of `optimized`'s inputs (each once), for backends whose inputs are the caller's.
int64_t input_bytes(const Graph& optimized);

/// The backend stages of `device`'s backend, `fuse` and `memory` on an optimised graph
/// (prepare() with BackendEntry::graph_stages).
Prepared prepare_for(Graph optimized, const Device& device, CompileRun& run);

/// The entry of `backend`; std::logic_error if it has none.
const BackendEntry& backend_entry(Backend backend);

} // namespace sinter
