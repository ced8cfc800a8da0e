// jit/profile/gpu_peak.cpp — the GPU's peak: device-to-device copy bandwidth by size and the
// cuBLASLt GEMM rate, timed by CUDA events
#include "jit/profile/gpu_peak.hpp"
#include "jit/runtime/memory_plan.hpp"

#include <algorithm>
#include <functional>
#include <string>

namespace sinter {

profile::DevicePeak measure_gpu_peak(CudaDevice& device, kernels::Fp32Math fp32) {
  const cuda::Driver& d = device.driver();
  cuda::StreamHandle stream = device.stream();
  // Two buffers of up to 256 MiB, each at most an eighth of what is free: a step at the largest
  // batch that fits (--batch-size max) leaves little room, and the probe must not run it out.
  std::size_t free = 0, total = 0;
  device.make_current();
  d.check(d.cuMemGetInfo(&free, &total), "cuMemGetInfo");
  std::size_t largest = std::size_t{256} << 20;
  while (largest > (std::size_t{1} << 20) && largest > free / 8)
    largest /= 4;
  DeviceBuffer from(largest), to(largest);
  cuda::StreamTimer timer(d, stream);
  // The best of `reps` timings of `work` enqueued on the stream, in seconds.
  auto best_of = [&](int reps, const std::function<void()>& work) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r)
      best = std::min(best, timer.milliseconds(work) * 1e-3);
    return best;
  };
  profile::DevicePeak peak;
  for (std::size_t bytes = std::size_t{1} << 20; bytes <= largest; bytes *= 4) {
    // Small copies repeat so that each timing spans at least 256 MiB of traffic.
    const std::size_t repeats = std::max<std::size_t>(1, largest / bytes);
    double seconds = best_of(5, [&] {
      for (std::size_t r = 0; r < repeats; ++r)
        d.check(d.cuMemcpyDtoDAsync(to.get(), from.get(), bytes, stream), "cuMemcpyDtoDAsync");
    });
    const auto moved = static_cast<int64_t>(2 * bytes);
    peak.bandwidth_by_bytes.emplace_back(moved, static_cast<double>(moved) *
                                                    static_cast<double>(repeats) / seconds);
  }
  peak.finish_curve();
  // The GEMM's operands live in those buffers: 4096² f32, or the largest square that fits.
  int64_t n = 4096;
  while (n > 256 && static_cast<std::size_t>(n * n * 4) > largest)
    n /= 2;
  if (kernels::CublasLt* blas = kernels::CublasLt::get()) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      kernels::GpuGemmShape gemm{.dtype = dtype, .shape = {.m = n, .n = n, .k = n}, .fp32 = fp32};
      blas->prepare(gemm);
      double seconds = best_of(4, [&] {
        blas->matmul(gemm, from.get(), from.get(), to.get(), device.gemm_workspace(), stream);
      });
      peak.flops_per_second =
          std::max(peak.flops_per_second, 2.0 * static_cast<double>(n * n * n) / seconds);
    }
  }
  peak.how = std::string("cuda (") + device.info().name +
             "): device-to-device copies of 1 MiB to " +
             format_bytes(static_cast<int64_t>(largest)) + ", cuBLASLt GEMMs of " +
             std::to_string(n) + "^3 in f32 and bf16 (best of several, events)";
  return peak;
}

} // namespace sinter
