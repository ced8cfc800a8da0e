// jit/codegen/kernel_library.hpp — compiled kernels by cache key: memory, then disk, then LLVM
#pragma once
#include "jit/codegen/cpu_target.hpp"
#include "jit/runtime/kernel_cache.hpp"

#include <mutex>
#include <unordered_map>

namespace sinter {

/// What one compile (one CpuExecutable) did for its kernels.
struct CompileReport {
  std::size_t kernels = 0;     ///< all kernels of the step, GEMMs included
  std::size_t generated = 0;   ///< kernels that went through code generation
  std::size_t compiled = 0;    ///< compiled by LLVM now
  std::size_t from_memory = 0; ///< already loaded in this process
  std::size_t from_disk = 0;   ///< loaded from the persistent cache
  double seconds = 0;          ///< wall time of the whole compile
};

/// The cache key of a kernel: its structure, shapes and dtypes, and the target's fingerprint,
/// computed from the IR before any code generation.
CacheKey kernel_key(const FusionPlan& plan, const Kernel& kernel, const std::string& fingerprint);

/// Process-wide table of loaded kernels in front of the persistent cache and the code generator.
class KernelLibrary {
public:
  explicit KernelLibrary(KernelCache& disk) : disk_(disk) {}

  /// The kernel's entry point: from memory, from disk (validated) or compiled (then stored).
  KernelEntry get(const FusionPlan& plan, const Kernel& kernel, CompileReport& report);
  CpuTarget& target() { return target_; }

private:
  struct KeyHash {
    std::size_t operator()(const CacheKey& k) const { return k.lo ^ (k.hi * 31); }
  };
  KernelCache& disk_;
  CpuTarget target_;
  std::mutex mutex_;
  std::unordered_map<CacheKey, KernelEntry, KeyHash> loaded_;
};

} // namespace sinter
