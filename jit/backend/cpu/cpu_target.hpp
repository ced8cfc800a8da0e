// jit/backend/cpu/cpu_target.hpp — the CPU target: O3 + host features through LLVM, loaded by ORC
#pragma once
#include "jit/passes/fuse.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace sinter {

/// Entry point of a compiled loop/reduce/scatter kernel (see jit/backend/cpu/cpu_schedule.hpp).
using KernelEntry = void (*)(void* const* buffers, int64_t begin, int64_t end);

/// Runs a generated kernel over [begin, end). Clang's -fsanitize=function (in the sanitizer
/// build) checks a type signature that the compiler places before every function it emits;
/// the JIT's kernels have none, so that one check is off for this call.
#if defined(__clang__)
[[clang::no_sanitize("function")]]
#endif
inline void run_kernel_entry(KernelEntry entry, void* const* buffers, int64_t begin, int64_t end) {
  entry(buffers, begin, end);
}

class CpuTarget {
public:
  CpuTarget();
  /// Code for another x86-64 CPU (an LLVM CPU name such as "sapphirerapids"): compile() with
  /// `assembly` shows what that CPU would run; load() is for the host's own target only.
  explicit CpuTarget(const std::string& cpu);
  ~CpuTarget();
  CpuTarget(const CpuTarget&) = delete;
  CpuTarget& operator=(const CpuTarget&) = delete;

  /// Everything about this target that changes generated code: triple, CPU, features, LLVM
  /// version and the emitter's build. Part of every kernel cache key.
  const std::string& fingerprint() const;

  /// Emits the kernel, optimises it at O3 for the host and returns a relocatable object file.
  /// When `assembly` is given it receives the optimised machine code as text.
  std::vector<char> compile(const FusionPlan& plan, const Kernel& kernel, const std::string& symbol,
                            std::string* assembly = nullptr);

  /// Whether bf16 stores round with the CPU's own instruction (AVX-512 BF16 or AVX-NE-CONVERT:
  /// vcvtneps2bf16) rather than on the bits in f32 arithmetic.
  bool native_bf16() const;

  /// Links an object produced by compile() into the JIT and returns its entry point.
  KernelEntry load(std::span<const char> object, const std::string& symbol);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace sinter
