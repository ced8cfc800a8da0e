// jit/backend/cpu/cpu_schedule.hpp — how a fused kernel walks its work on the CPU: an entry
// point over a slice [begin, end) of its parallel range that the thread pool hands out
#pragma once
#include "jit/codegen/kernel_emitter.hpp"

#include <cstdint>

namespace sinter {

/// A CPU kernel is `void NAME(ptr buffers, i64 begin, i64 end)`: buffers[0] is the output,
/// buffers[1 + i] the kernel's i-th read; [begin, end) is a slice of its parallel range (rows
/// for loops and row-reductions, output elements for contiguous reductions, 1 for scatters).
/// Math: LLVM intrinsics (vectorised through libmvec), libm, and a vectorisable f32 tanh.
/// bf16 stores round with vcvtneps2bf16 where the CPU has AVX-512 BF16 (or AVX-NE-CONVERT).
class CpuSchedule final : public KernelSchedule {
public:
  explicit CpuSchedule(bool native_bf16 = false) : native_bf16_(native_bf16) {}
  void emit(KernelEmitter& emitter, const std::string& name) override;
  llvm::Value* math(KernelEmitter& emitter, MathFunction function,
                    std::span<llvm::Value* const> args) override;
  bool native_bf16_rounding() const override { return native_bf16_; }

private:
  bool native_bf16_;
};

/// Size of the parallel range the kernel's entry point splits.
int64_t parallel_range(const Graph& graph, const Kernel& kernel);
/// Work per range step (elements touched), used to pick chunk sizes.
int64_t work_per_step(const Graph& graph, const Kernel& kernel);

} // namespace sinter
