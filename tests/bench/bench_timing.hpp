// tests/bench/bench_timing.hpp — what every sinter benchmark shares: timing a step (first call,
// warm-up, then the median of timed repetitions), the flags that set those counts, and the
// deterministic inputs the Python peers reproduce
#pragma once
#include "jit/runtime/host_tensor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

namespace bench {

/// offset + scale * sin(0.9 * i + phase) over the flat index i, float32 (peers.py's pattern()).
inline sinter::HostTensor pattern(sinter::Shape shape, double scale, double phase,
                                  double offset = 0.0) {
  std::vector<double> v(static_cast<std::size_t>(sinter::numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = offset + scale * std::sin(0.9 * static_cast<double>(i) + phase);
  return sinter::HostTensor::from_doubles(sinter::DType::f32, std::move(shape), v);
}

/// The flags every benchmark program takes: --threads N (≥ 1), --warmup N (≥ 0), --iters N (≥ 1).
struct StepFlags {
  int threads = 2;
  int warmup = 5;
  int iters = 30;
};

/// If argv[i] is one of StepFlags' flags, reads its value (advancing i) and returns whether it
/// was valid; nullopt for any other argument.
inline std::optional<bool> read_step_flag(int argc, char** argv, int& i, StepFlags& flags) {
  std::string_view arg = argv[i];
  int* slot = arg == "--threads"  ? &flags.threads
              : arg == "--warmup" ? &flags.warmup
              : arg == "--iters"  ? &flags.iters
                                  : nullptr;
  if (!slot) return std::nullopt;
  if (i + 1 >= argc) return false;
  char* end = nullptr;
  long value = std::strtol(argv[++i], &end, 10);
  if (*end != '\0' || value < (slot == &flags.warmup ? 0 : 1)) return false;
  *slot = static_cast<int>(value);
  return true;
}

struct StepTiming {
  double first_call_s = 0; ///< trace + compile (or cache load) + one step
  double median_step_s = 0;
};

/// Calls `one_step()` once (timed as the first call), `warmup` more times untimed, then `iters`
/// timed times, and returns the first-call time and the median of the timed ones.
template <class OneStep> StepTiming time_steps(OneStep&& one_step, int warmup, int iters) {
  using clock = std::chrono::steady_clock;
  auto elapsed = [](clock::time_point since) {
    return std::chrono::duration<double>(clock::now() - since).count();
  };
  StepTiming t;
  auto start = clock::now();
  one_step();
  t.first_call_s = elapsed(start);
  for (int i = 0; i < warmup; ++i)
    one_step();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    start = clock::now();
    one_step();
    times.push_back(elapsed(start));
  }
  std::sort(times.begin(), times.end());
  std::size_t n = times.size();
  if (n) t.median_step_s = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  return t;
}

} // namespace bench
