// jit/runtime/memory_plan.cpp — linear-scan, first-fit placement of buffers by lifetime
#include "jit/runtime/memory_plan.hpp"
#include "jit/settings.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
  const std::vector<ValueId> storage = storage_over_inputs(fusion); // outputs over inputs
  for (const NamedValue& out : g.outputs()) {
    if (!is_output[out.id] && storage[out.id] == out.id)
      output_bytes_ += aligned(numel(g.type(out.id).shape) *
                               static_cast<int64_t>(dtype_bytes(g.type(out.id).dtype)));
    is_output[out.id] = true;
  }
  // A collective's operands stay alive until its wait point: it reads them while later kernels
  // run.
  std::vector<std::size_t> last_use = buffer_last_use(fusion);

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

std::size_t MemoryPlan::peak_kernel() const {
  std::size_t kernels = 0;
  for (const BufferSlot& s : slots_)
    kernels = std::max(kernels, s.last + 1);
  // Live bytes per kernel by a difference array over the slots' lifetimes.
  std::vector<int64_t> delta(kernels + 1, 0);
  for (const BufferSlot& s : slots_) {
    delta[s.first] += s.bytes;
    delta[s.last + 1] -= s.bytes;
  }
  std::size_t peak = 0;
  int64_t live = 0, most = -1;
  for (std::size_t k = 0; k < kernels; ++k) {
    live += delta[k];
    if (live > most) {
      most = live;
      peak = k;
    }
  }
  return peak;
}

std::vector<const BufferSlot*> MemoryPlan::live_at(std::size_t kernel) const {
  std::vector<const BufferSlot*> out;
  for (const BufferSlot& s : slots_)
    if (s.first <= kernel && kernel <= s.last) out.push_back(&s);
  return out;
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

std::vector<PlannedBuffer> largest_buffers(std::vector<PlannedBuffer> buffers, std::size_t count) {
  std::stable_sort(
      buffers.begin(), buffers.end(),
      [](const PlannedBuffer& a, const PlannedBuffer& b) { return a.bytes > b.bytes; });
  if (buffers.size() > count) buffers.resize(count);
  return buffers;
}

std::vector<PlannedBuffer> arena_buffers(const Graph& graph, const MemoryPlan& memory) {
  std::vector<PlannedBuffer> out;
  for (const BufferSlot* live : memory.live_at(memory.peak_kernel())) {
    const BufferSlot& slot = *live;
    const Node& n = graph.node(slot.node);
    const std::string& path = graph.scope_path(n.scope);
    out.push_back({"arena: " + (path.empty() ? std::string("(top level)") : path) + " " +
                       std::string(op_name(n.op)) + " " + to_string(n.type),
                   slot.bytes});
  }
  return out;
}

std::string format_bytes(int64_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (std::abs(value) >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return text;
}

int64_t parse_bytes(const std::string& text) {
  auto fail = [&] {
    return std::invalid_argument("'" + text +
                                 "' is not a size: give bytes, optionally with a suffix K, M, G "
                                 "or T (powers of 1024; KiB, MiB, GiB, TiB also accepted)");
  };
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    throw fail();
  }
  std::string suffix = text.substr(used);
  if (!suffix.empty() && suffix.back() == 'B' && suffix.size() > 1) suffix.pop_back(); // "GB"
  if (suffix.size() == 2 && suffix[1] == 'i') suffix.pop_back();                       // "Gi"
  double scale = 1;
  if (suffix == "K" || suffix == "k")
    scale = 1024.0;
  else if (suffix == "M")
    scale = 1024.0 * 1024;
  else if (suffix == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B")
    throw fail();
  if (!(value > 0) || !std::isfinite(value * scale) || value * scale > 9.0e18) throw fail();
  return static_cast<int64_t>(value * scale);
}

std::optional<int64_t> memory_limit_from_environment() {
  const char* value = setting("SINTER_MEMORY_LIMIT");
  if (!value || !*value) return std::nullopt;
  try {
    return parse_bytes(value);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("sinter: SINTER_MEMORY_LIMIT: ") + e.what());
  }
}

} // namespace sinter
