// jit/runtime/memory_plan.hpp — static arena layout from buffer lifetimes, and the peak it needs
#pragma once
#include "jit/passes/fuse.hpp"

#include <optional>
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
  const std::vector<BufferSlot>& slots() const { return slots_; }
  std::string print() const;

private:
  std::vector<BufferSlot> slots_;
  std::vector<int64_t> offset_by_node_;
  int64_t arena_bytes_ = 0, output_bytes_ = 0, unshared_bytes_ = 0;
};

} // namespace sinter
