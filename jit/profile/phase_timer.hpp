// jit/profile/phase_timer.hpp — SINTER_TIME_PHASES=1: one stderr line per compile phase and its
// time
#pragma once
#include "jit/settings.hpp"

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

namespace sinter {

/// Times the scope it lives in and, when SINTER_TIME_PHASES=1, prints
/// `sinter: phase <name> <ms> ms` when it ends, like each compile stage (CompileRun) does: for
/// what is not a stage, such as a program's first run.
class PhaseTimer {
public:
  explicit PhaseTimer(std::string_view name)
      : name_(enabled() ? std::string(name) : std::string()),
        start_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() {
    if (name_.empty()) return;
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
                    .count();
    std::fprintf(stderr, "sinter: phase %s %.1f ms\n", name_.c_str(), ms);
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  static bool enabled() { return settings().time_phases; }

private:
  std::string name_;
  std::chrono::steady_clock::time_point start_;
};

} // namespace sinter
