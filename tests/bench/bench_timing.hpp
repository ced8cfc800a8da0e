// tests/bench/bench_timing.hpp — what every sinter benchmark shares: timing a step (first call,
// warm-up, then the median of timed repetitions, or rounds served on request), the flags that
// set those counts, and the deterministic inputs the Python peers reproduce
#pragma once
#include "jit/runtime/host_tensor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
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
  int steps = 0; ///< how many steps were timed
};

/// The median of `times` (0 if empty).
inline double median(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  std::size_t n = times.size();
  if (!n) return 0;
  return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

using bench_clock = std::chrono::steady_clock;

/// Seconds since `since`.
inline double seconds_since(bench_clock::time_point since) {
  return std::chrono::duration<double>(bench_clock::now() - since).count();
}

/// Calls `one_step()` once, timed (the first call compiles), then `warmup` more times; returns
/// the first call's seconds.
template <class OneStep> double first_call_then_warmup(OneStep& one_step, int warmup) {
  auto start = bench_clock::now();
  one_step();
  double first_call_s = seconds_since(start);
  for (int i = 0; i < warmup; ++i)
    one_step();
  return first_call_s;
}

/// Calls `one_step()` once (timed as the first call), `warmup` more times untimed, then `iters`
/// timed times, and returns the first-call time and the median of the timed ones.
template <class OneStep> StepTiming time_steps(OneStep&& one_step, int warmup, int iters) {
  StepTiming t;
  t.first_call_s = first_call_then_warmup(one_step, warmup);
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    auto start = bench_clock::now();
    one_step();
    times.push_back(seconds_since(start));
  }
  t.median_step_s = median(times);
  t.steps = iters;
  return t;
}

/// Serve mode: the line protocol of tests/bench/train_rounds.py, which keeps every contender's
/// process alive and alternates them in short rounds. Calls `one_step()` once (timed as the
/// first call) and `warmup` more times, then `ready(first_call_s)`, which prints the `ready ...`
/// line. Then, for each line read from stdin:
///   run K [W]  runs W untimed steps (default 0), then K timed ones, and prints
///              `times=<s>,<s>,...` (seconds, one per timed step)
///   quit       returns (so does the end of the input)
/// Anything else prints `error=<the line>`. Returns the first-call time and the median over
/// every step timed in a round.
template <class OneStep, class Ready>
StepTiming serve_steps(OneStep&& one_step, int warmup, Ready&& ready) {
  StepTiming t;
  t.first_call_s = first_call_then_warmup(one_step, warmup);
  ready(t.first_call_s);
  std::fflush(stdout);
  std::vector<double> all;
  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    std::istringstream words(line);
    std::string verb, rest;
    long k = 0, w = 0;
    bool ok = (words >> verb >> k) && verb == "run" && k >= 1;
    if (ok && !(words >> w)) { // no W: fine if nothing follows K
      w = 0;
      ok = words.eof();
    }
    if (!ok || w < 0 || (words >> rest)) {
      std::printf("error=unknown command '%s' (run K [W] | quit)\n", line.c_str());
      std::fflush(stdout);
      continue;
    }
    for (long i = 0; i < w; ++i)
      one_step();
    std::string reply = "times=";
    for (long i = 0; i < k; ++i) {
      auto start = bench_clock::now();
      one_step();
      double s = seconds_since(start);
      all.push_back(s);
      char text[32];
      std::snprintf(text, sizeof text, i ? ",%.6g" : "%.6g", s);
      reply += text;
    }
    std::printf("%s\n", reply.c_str());
    std::fflush(stdout);
  }
  t.median_step_s = median(all);
  t.steps = static_cast<int>(all.size());
  return t;
}

} // namespace bench
