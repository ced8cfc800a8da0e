// tests/bench/bench_timing.hpp — how every sinter benchmark times a step: first call, warm-up,
// then the median of timed repetitions
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

namespace bench {

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
