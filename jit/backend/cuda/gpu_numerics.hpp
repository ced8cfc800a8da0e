// jit/backend/cuda/gpu_numerics.hpp — --check-numerics on a GPU: a device-side inf/NaN scan of
// each launch's outputs, and the op that made one named as on the CPU
#pragma once
#include "jit/backend/cuda/cuda_device.hpp"
#include "jit/backend/cuda/launch_plan.hpp"
#include "jit/passes/fuse.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sinter {

/// Checks a step's kernels one launch at a time (the step then runs launch by launch, waiting
/// for each: several times slower, for debugging). Only the scan's result, 8 bytes per output,
/// comes to the host, unless it found something: then the buffers of the launch's kernels are
/// downloaded and replayed (check_kernel_numerics) to name the op, its model path and whether
/// an operand arrived non-finite.
class GpuNumericsCheck {
public:
  explicit GpuNumericsCheck(CudaDevice& device);

  /// After the launch that ran kernels [first, last) of `plan` (a GEMM and the epilogue it
  /// absorbed are two) on the device's stream: throws NumericsError if a floating-point output
  /// of theirs holds inf or NaN. `pointer_of(v)`: where buffer v lives (0: nowhere).
  void after_launch(const FusionPlan& plan, std::size_t first, std::size_t last,
                    const NodePointer& pointer_of);

private:
  [[noreturn]] void explain(const FusionPlan& plan, std::size_t first, std::size_t last,
                            ValueId output, uint64_t element, const NodePointer& pointer_of);

  CudaDevice& device_;
  cuda::FunctionHandle scan_ = nullptr;
  DeviceBuffer found_;                  ///< one word per scanned output (non_finite_scan.hpp)
  std::vector<uint64_t> found_on_host_; ///< its copy
};

} // namespace sinter
