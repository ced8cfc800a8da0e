// jit/runtime/kernel_lookup.hpp — the one way every backend gets a kernel: structural cache key,
// then memory, then the disk cache, then compile and store
#pragma once
#include "jit/passes/fuse.hpp"
#include "jit/runtime/compile_report.hpp"
#include "jit/runtime/kernel_cache.hpp"

#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace sinter {

/// The cache key of a kernel: its structure, shapes and dtypes, and the target's fingerprint,
/// computed from the IR before any code generation.
CacheKey kernel_key(const FusionPlan& plan, const Kernel& kernel, const std::string& fingerprint);

/// The kernel's symbol: `sinter_<model path>_<role>_<key>`, e.g.
/// `sinter_blocks_N_attn_bwd_softmax_reduce_sum_<32 hex>`, so profilers (perf, ncu, nsys) say
/// which part of the model a kernel computes. The path is the scope of the kernel's root
/// (layer indices read N: one compiled kernel serves every layer of the same shape; `bwd` marks
/// gradient code, a composite's name the code it was lowered from), the role its kind and
/// root op.
std::string kernel_symbol(const FusionPlan& plan, const Kernel& kernel, const CacheKey& key);

/// A cache payload that carries its symbol (the first process to compile a kernel names it; the
/// others load that name), and the reverse; nullopt for a payload without one.
std::vector<char> named_payload(const std::string& symbol, std::span<const char> binary);
std::optional<std::pair<std::string, std::vector<char>>>
split_named_payload(std::span<const char> payload);

/// A backend's loaded kernels (`Entry`: a function pointer, a CUfunction, ...) in front of the
/// persistent cache and its code generator. The backend supplies how to compile a kernel to a
/// binary (object file, cubin) and how to load a binary; the policy is here, once.
template <class Entry> class KernelLookup {
public:
  /// Generated code for `symbol` (what the disk cache stores).
  using Compile = std::function<std::vector<char>(const std::string& symbol)>;
  /// The loaded entry point of a binary from Compile or the disk cache.
  using Load = std::function<Entry(std::span<const char> binary, const std::string& symbol)>;

  explicit KernelLookup(std::string fingerprint) : fingerprint_(std::move(fingerprint)) {}

  const std::string& fingerprint() const { return fingerprint_; }

  /// The kernel's entry point: from memory, from `disk` (validated) or compiled (then stored
  /// there). Counts what happened in `report`. Thread-safe; `load` runs under the lock.
  Entry get(const FusionPlan& plan, const Kernel& kernel, KernelCache& disk, CompileReport& report,
            const Compile& compile, const Load& load) {
    ++report.generated;
    CacheKey key = kernel_key(plan, kernel, fingerprint_);
    std::lock_guard lock(mutex_);
    if (auto it = loaded_.find(key); it != loaded_.end()) {
      ++report.from_memory;
      report.origins.push_back({kernel.root, KernelOrigin::From::memory, it->second.symbol});
      return it->second.entry;
    }
    std::string symbol;
    std::vector<char> binary;
    std::optional<std::vector<char>> cached = disk.load(key);
    auto named = cached ? split_named_payload(*cached) : std::nullopt;
    if (named) {
      symbol = std::move(named->first);
      binary = std::move(named->second);
      ++report.from_disk;
      report.origins.push_back({kernel.root, KernelOrigin::From::disk, symbol});
    } else {
      symbol = kernel_symbol(plan, kernel, key);
      binary = compile(symbol);
      disk.store(key, named_payload(symbol, binary));
      disk.note_compiled();
      ++report.compiled;
      report.origins.push_back({kernel.root, KernelOrigin::From::compiled, symbol});
    }
    Entry entry = load(binary, symbol);
    loaded_.emplace(key, Loaded{entry, symbol});
    return entry;
  }

private:
  struct KeyHash {
    std::size_t operator()(const CacheKey& k) const { return k.lo ^ (k.hi * 31); }
  };
  std::string fingerprint_;
  std::mutex mutex_;
  struct Loaded {
    Entry entry;
    std::string symbol;
  };
  std::unordered_map<CacheKey, Loaded, KeyHash> loaded_;
};

} // namespace sinter
