// jit/profile/cpu_peak.cpp — the host's measured peak for the profiler's roofline: stream
// bandwidth by working set and the GEMM rate, and the curve both device probes fill
#include "jit/profile/profiler.hpp"

#include "jit/backend/cpu/thread_pool.hpp"
#include "kernels/cpu/blas_gemm.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

namespace sinter::profile {
namespace {

/// out = in · (1 + 1e-7), 16 floats at a time in the widest vectors the CPU has (the generated
/// kernels use them too); n is a multiple of 16.
using Floats16 = float __attribute__((vector_size(64)));
__attribute__((target_clones("avx512f", "avx2", "default"))) void
stream_scale(float* __restrict out, const float* __restrict in, std::size_t n) {
  for (std::size_t i = 0; i + 16 <= n; i += 16) {
    Floats16 v;
    std::memcpy(&v, in + i, sizeof v);
    v *= 1.0000001f;
    std::memcpy(out + i, &v, sizeof v);
  }
}

} // namespace

void DevicePeak::finish_curve() {
  auto& curve = bandwidth_by_bytes;
  for (std::size_t i = curve.size(); i-- > 1;)
    curve[i - 1].second = std::max(curve[i - 1].second, curve[i].second);
  bytes_per_second = curve.empty() ? 0.0 : curve.front().second;
}

DevicePeak measure_cpu_peak(ThreadPool* pool) {
  DevicePeak peak;
  const int64_t threads = pool ? static_cast<int64_t>(pool->size()) : 1;
  auto parallel = [&](const std::function<void(std::size_t)>& body) {
    if (pool)
      pool->parallel_for(threads, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t)
          body(static_cast<std::size_t>(t));
      });
    else
      body(0);
  };
  auto best_of = [](int reps, const std::function<void()>& work) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      int64_t t0 = now_ns();
      work();
      best = std::min(best, static_cast<double>(now_ns() - t0) * 1e-9);
    }
    return best;
  };
  // Bandwidth by working set: every thread copies its own buffer, from cache-sized to well
  // past the last-level cache.
  // A streaming scale (read one float, write one) rather than memcpy: glibc's memcpy takes
  // paths whose speed depends on the size and the CPU model (rep movsb), which kernels never do.
  for (std::size_t per_thread :
       {std::size_t{16} << 10, std::size_t{64} << 10, std::size_t{256} << 10, std::size_t{1} << 20,
        std::size_t{4} << 20, std::size_t{16} << 20, std::size_t{64} << 20}) {
    const std::size_t floats = per_thread / sizeof(float);
    std::vector<std::vector<float>> from(static_cast<std::size_t>(threads)),
        to(static_cast<std::size_t>(threads));
    parallel([&](std::size_t t) {
      from[t].assign(floats, 1.0f);
      to[t].assign(floats, 0.0f);
    });
    // Small copies repeat inside each thread, so the pool's hand-out is not what is timed.
    const std::size_t repeats = std::max<std::size_t>(1, (std::size_t{4} << 20) / per_thread);
    const int reps = per_thread <= (std::size_t{4} << 20) ? 12 : 4;
    double seconds = best_of(reps, [&] {
      parallel([&](std::size_t t) {
        float* out = to[t].data();
        const float* in = from[t].data();
        for (std::size_t r = 0; r < repeats; ++r)
          stream_scale(out, in, floats);
      });
    });
    const auto moved = static_cast<int64_t>(2 * per_thread) * threads;
    const double rate = static_cast<double>(moved) * static_cast<double>(repeats) / seconds;
    peak.bandwidth_by_bytes.emplace_back(moved, rate);
  }
  peak.finish_curve();
  // FLOP/s: each thread one single-threaded f32 GEMM of 512³ through the GEMM bridge, as the
  // CPU backend runs its GEMMs.
  constexpr int64_t n = 512;
  std::vector<std::vector<float>> a(static_cast<std::size_t>(threads)),
      c(static_cast<std::size_t>(threads));
  parallel([&](std::size_t t) {
    a[t].assign(static_cast<std::size_t>(n * n), 0.5f);
    c[t].assign(static_cast<std::size_t>(n * n), 0.0f);
  });
  kernels::GemmShape shape{.m = n, .n = n, .k = n};
  double gemm_seconds = best_of(12, [&] {
    parallel([&](std::size_t t) {
      kernels::gemm(DType::f32, shape, a[t].data(), a[t].data(), c[t].data());
    });
  });
  peak.flops_per_second =
      2.0 * static_cast<double>(n * n * n) * static_cast<double>(threads) / gemm_seconds;
  char how[200];
  std::snprintf(
      how, sizeof how,
      "cpu, %lld threads: a streaming scale over 16 KiB to 64 MiB per thread, f32 GEMM 512^3 per "
      "thread (best of several)",
      static_cast<long long>(threads));
  peak.how = how;
  return peak;
}

double DevicePeak::bandwidth_for(int64_t bytes) const {
  for (const auto& [working_set, rate] : bandwidth_by_bytes)
    if (bytes <= working_set) return rate;
  return bandwidth_by_bytes.empty() ? bytes_per_second : bandwidth_by_bytes.back().second;
}

} // namespace sinter::profile
