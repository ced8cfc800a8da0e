// jit/runtime/memory_plan.hpp — static arena layout from buffer lifetimes, and the peak it needs
#pragma once
#include "jit/passes/fuse.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sinter {

struct BufferSlot {
  ValueId node = 0;
  int64_t offset = 0;    ///< bytes from the arena start (64-byte aligned)
  int64_t bytes = 0;     ///< rounded up to the alignment
  std::size_t first = 0; ///< kernel that writes it
  std::size_t last = 0;  ///< last kernel that reads it
};

/// Where every intermediate buffer lives in one arena. Buffers whose lifetimes do not overlap
/// share memory. Graph outputs are written straight into the result tensors, outside the arena.
class MemoryPlan {
public:
  static constexpr int64_t alignment = 64;

  MemoryPlan() = default;
  explicit MemoryPlan(const FusionPlan& fusion);

  /// Bytes of the arena (intermediates, after reuse).
  int64_t arena_bytes() const { return arena_bytes_; }
  /// Bytes a step needs besides its inputs: the arena plus the outputs.
  int64_t peak_bytes() const { return arena_bytes_ + output_bytes_; }
  /// Bytes the intermediates would take without reuse (what reuse saves is the difference).
  int64_t unshared_bytes() const { return unshared_bytes_; }
  std::optional<int64_t> offset_of(ValueId node) const;
  /// The kernel while which the most intermediate bytes are alive, and the slots alive then
  /// (what an out-of-memory report lists: the buffers that make the peak).
  std::size_t peak_kernel() const;
  std::vector<const BufferSlot*> live_at(std::size_t kernel) const;
  const std::vector<BufferSlot>& slots() const { return slots_; }
  std::string print() const;

private:
  std::vector<BufferSlot> slots_;
  std::vector<int64_t> offset_by_node_;
  int64_t arena_bytes_ = 0, output_bytes_ = 0, unshared_bytes_ = 0;
};

/// One buffer of a planned step, for reports: its size and the model path (scope) of the
/// node that writes it.
struct PlannedBuffer {
  std::string what; ///< "arena: blocks.3.attn (f32[256,197,768])", "input: teacher.head.weight"
  int64_t bytes = 0;
};

/// The memory one compiled step needs on its device while it runs, by kind, as the backend
/// would allocate it (plan_step_memory). On the CPU, the inputs are the caller's tensors; on a
/// GPU, their device copies: one for carried and resident inputs, one per input set (two) for
/// the rest.
struct StepMemory {
  int64_t arena = 0;                  ///< intermediates, after reuse
  int64_t outputs = 0;                ///< outputs written outside the arena
  int64_t inputs = 0;                 ///< every input: parameters, optimizer state, frozen, batch
  int64_t workspace = 0;              ///< library scratch (cuBLASLt), if not allocated yet
  int64_t runtime = 0;                ///< the backend's own: kernel images, CUDA graphs
  std::vector<PlannedBuffer> largest; ///< the five largest buffers, largest first
  int64_t total() const { return arena + outputs + inputs + workspace + runtime; }
};

/// The five largest of `buffers`, largest first (what out-of-memory reports list).
std::vector<PlannedBuffer> largest_buffers(std::vector<PlannedBuffer> buffers,
                                           std::size_t count = 5);
/// The arena buffers alive at `memory`'s peak, as PlannedBuffers named by their node's model
/// path.
std::vector<PlannedBuffer> arena_buffers(const Graph& graph, const MemoryPlan& memory);
/// "1.50 GiB" style sizes for messages.
std::string format_bytes(int64_t bytes);

/// Raised when a step's memory cannot be allocated (a device allocation failing, or the
/// planned peak over SINTER_MEMORY_LIMIT). what() explains: the planned peak, the free
/// memory, the largest buffers with their model paths and, from a training step, the largest
/// batch that fits.
class OutOfMemory : public std::runtime_error {
public:
  OutOfMemory(const std::string& message, int64_t planned, int64_t available)
      : std::runtime_error(message), planned_(planned), available_(available) {}
  int64_t planned_bytes() const { return planned_; }
  int64_t available_bytes() const { return available_; }

private:
  int64_t planned_, available_;
};

/// SINTER_MEMORY_LIMIT (bytes; suffixes K, M, G, T for powers of 1024), or nullopt when unset.
/// A step whose planned peak exceeds it refuses to compile with OutOfMemory, as a device
/// would refuse the allocation. Throws std::invalid_argument on a malformed value.
std::optional<int64_t> memory_limit_from_environment();
/// "123", "64M", "8G", "1.5GiB": bytes; std::invalid_argument naming the accepted forms.
int64_t parse_bytes(const std::string& text);

} // namespace sinter
