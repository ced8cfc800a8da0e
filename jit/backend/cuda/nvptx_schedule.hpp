// jit/backend/cuda/nvptx_schedule.hpp — how a fused kernel maps to a CUDA grid: launch
// strategies (vectorised elementwise, thread/warp/block/column reductions, atomic scatter)
#pragma once
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/codegen/kernel_emitter.hpp"

#include <cstdint>
#include <optional>

namespace sinter {

/// An NVPTX kernel is `void NAME(ptr addrspace(1) out, ptr addrspace(1) read0, ...)`, launched
/// on the 1-D grid gpu_launch() describes; it walks its work grid-stride, so any grid is
/// correct. Math functions are calls to libdevice (`__nv_expf`, ...) that the target links.
class NvptxSchedule final : public KernelSchedule {
public:
  NvptxSchedule() = default;
  /// A kernel of a RuntimeRowsKernel instance built with `rows_extent` rows, for `launch` (the
  /// real kernel's): it takes one more parameter, `i64 rows`, and reads its loop bounds from it.
  NvptxSchedule(const GpuLaunch& launch, int64_t rows_extent)
      : runtime_rows_launch_(launch), rows_extent_(rows_extent) {}

  void emit(KernelEmitter& emitter, const std::string& name) override;
  llvm::Value* math(KernelEmitter& emitter, MathFunction function,
                    std::span<llvm::Value* const> args) override;

private:
  std::optional<GpuLaunch> runtime_rows_launch_;
  int64_t rows_extent_ = 0;
};

} // namespace sinter
