// jit/runtime/memory_plan.cpp — linear-scan, first-fit placement of buffers by lifetime
#include "jit/runtime/memory_plan.hpp"

#include <algorithm>
#include <map>
#include <sstream>

namespace sinter {
namespace {

int64_t aligned(int64_t bytes) {
  return (bytes + MemoryPlan::alignment - 1) / MemoryPlan::alignment * MemoryPlan::alignment;
}

/// Free ranges of the arena, kept sorted and coalesced.
class FreeList {
public:
  int64_t take(int64_t bytes, int64_t& arena_end) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      int64_t offset = it->first, size = it->second;
      free_.erase(it);
      if (size > bytes) free_[offset + bytes] = size - bytes;
      return offset;
    }
    // Grow the arena, reusing a free range that ends at the current end.
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second == arena_end) {
        int64_t offset = last->first;
        free_.erase(last);
        arena_end = offset + bytes;
        return offset;
      }
    }
    int64_t offset = arena_end;
    arena_end += bytes;
    return offset;
  }

  void give_back(int64_t offset, int64_t bytes) {
    auto [it, inserted] = free_.emplace(offset, bytes);
    if (auto next = std::next(it); next != free_.end() && offset + bytes == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

private:
  std::map<int64_t, int64_t> free_; // offset -> size
};

} // namespace

MemoryPlan::MemoryPlan(const FusionPlan& fusion) {
  const Graph& g = *fusion.graph;
  offset_by_node_.assign(g.size(), -1);
  std::vector<bool> is_output(g.size(), false);
  for (const NamedValue& out : g.outputs()) {
    if (!is_output[out.id])
      output_bytes_ += aligned(numel(g.type(out.id).shape) *
                               static_cast<int64_t>(dtype_bytes(g.type(out.id).dtype)));
    is_output[out.id] = true;
  }
  std::vector<std::size_t> last_use(g.size(), 0);
  for (std::size_t k = 0; k < fusion.kernels.size(); ++k)
    for (ValueId r : fusion.kernels[k].reads)
      last_use[r] = k;

  for (std::size_t k = 0; k < fusion.kernels.size(); ++k)
    for (ValueId written : fusion.kernels[k].outputs()) {
      if (is_output[written]) continue;
      const TensorType& t = g.type(written);
      int64_t bytes = aligned(std::max<int64_t>(1, numel(t.shape)) *
                              static_cast<int64_t>(dtype_bytes(t.dtype)));
      slots_.push_back(BufferSlot{written, 0, bytes, k, std::max(k, last_use[written])});
      unshared_bytes_ += bytes;
    }
  // Linear scan in kernel order: before placing kernel k's output, release every buffer whose
  // last reader ran before k (a kernel's output never overlaps what it reads).
  FreeList free;
  std::vector<std::size_t> order(slots_.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::vector<bool> released(slots_.size(), false);
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    BufferSlot& slot = slots_[i];
    for (std::size_t j = 0; j < i; ++j)
      if (!released[j] && slots_[j].last < slot.first) {
        free.give_back(slots_[j].offset, slots_[j].bytes);
        released[j] = true;
      }
    const Kernel& kernel = fusion.kernels[slot.first];
    if (kernel.in_place() && slot.node == kernel.root) {
      // Take over the slot of the buffer this kernel writes over; it dies here.
      for (std::size_t j = 0; j < i; ++j)
        if (slots_[j].node == kernel.overwrites && !released[j]) {
          slot.offset = slots_[j].offset;
          released[j] = true;
        }
    } else {
      slot.offset = free.take(slot.bytes, arena_bytes_);
    }
    offset_by_node_[slot.node] = slot.offset;
  }
}

std::optional<int64_t> MemoryPlan::offset_of(ValueId node) const {
  if (node >= offset_by_node_.size() || offset_by_node_[node] < 0) return std::nullopt;
  return offset_by_node_[node];
}

std::string MemoryPlan::print() const {
  std::ostringstream os;
  os << "memory plan: arena " << arena_bytes_ << " bytes (" << unshared_bytes_
     << " without reuse), outputs " << output_bytes_ << " bytes, peak " << peak_bytes()
     << " bytes\n";
  for (const BufferSlot& s : slots_)
    os << "  %" << s.node << " @" << s.offset << " +" << s.bytes << " kernels " << s.first << ".."
       << s.last << "\n";
  return os.str();
}

} // namespace sinter
