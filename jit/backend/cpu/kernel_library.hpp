// jit/backend/cpu/kernel_library.hpp — the CPU's loaded kernels: the shared lookup (memory,
// disk, compile) with the ORC target that compiles and links them
#pragma once
#include "jit/backend/cpu/cpu_target.hpp"
#include "jit/runtime/kernel_lookup.hpp"

namespace sinter {

/// Process-wide table of the CPU's loaded kernels in front of the persistent cache and LLVM.
class KernelLibrary {
public:
  explicit KernelLibrary(KernelCache& disk) : disk_(disk), lookup_(target_.fingerprint()) {}

  /// The kernel's entry point: from memory, from disk (validated) or compiled (then stored).
  KernelEntry get(const FusionPlan& plan, const Kernel& kernel, CompileReport& report);
  CpuTarget& target() { return target_; }

private:
  KernelCache& disk_;
  CpuTarget target_; // before lookup_, which takes its fingerprint
  KernelLookup<KernelEntry> lookup_;
};

} // namespace sinter
