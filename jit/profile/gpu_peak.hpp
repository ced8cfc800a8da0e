// jit/profile/gpu_peak.hpp — the GPU's measured peak for the profiler's roofline
#pragma once
#include "jit/backend/cuda/cuda_device.hpp"
#include "jit/profile/profiler.hpp"
#include "kernels/cuda/cublaslt_gemm.hpp"

namespace sinter {

/// The GPU's peak for the profiler: device-to-device copies of 1 MiB to 256 MiB (bandwidth by
/// bytes moved, read + write) and cuBLASLt GEMMs of 4096³ in f32 (as the step's fp32 mode) and
/// bf16, each timed by events, the best of several. The GEMM rate is the faster of the two:
/// a kernel far below it may gain from the low precision.
profile::DevicePeak measure_gpu_peak(CudaDevice& device, kernels::Fp32Math fp32);

} // namespace sinter
