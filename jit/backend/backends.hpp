// jit/backend/backends.hpp — the table of backends: how each compiles a graph, by name
#pragma once
#include "jit/backend/device.hpp"
#include "jit/backend/executable.hpp"

#include <memory>
#include <span>
#include <string_view>

namespace sinter {

class Context;
class Graph;

/// One backend's registration.
struct BackendEntry {
  Backend backend;
  std::string_view name; ///< what Device::parse accepts
  bool numbered;         ///< devices are NAME:N (N = 0, 1, ...), NAME alone meaning NAME:0
  /// Compiles an optimised graph (the pass pipeline already ran) for `device`.
  std::unique_ptr<Executable> (*compile)(const Graph& optimized, const Device& device,
                                         Context& context);
};

/// SINTER_ATTENTION: `fused` (the default: each backend's fused attention kernels where it has
/// them) or `decomposed` (GEMMs and a softmax with the scores in memory, to compare or to work
/// around a kernel). Anything else throws std::invalid_argument naming the accepted values.
bool attention_decomposition_requested();

/// Every backend, in the order `sinter info` and error messages list them.
std::span<const BackendEntry> backends();
/// The entry of `backend`; std::logic_error if it has none.
const BackendEntry& backend_entry(Backend backend);

} // namespace sinter
