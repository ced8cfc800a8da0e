// recipes/recipe_support.hpp — what every recipe shares: flags, progress line, result line
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace recipe {

struct Flag {
  std::string name, default_value, help;
};

/// `--name value` or `--name=value` flags with defaults; `--help` prints them and exits 0; an
/// unknown flag or a bad value exits 2 with a message saying what to do.
class Flags {
public:
  Flags(std::string program, std::string summary, std::vector<Flag> flags, int argc, char** argv)
      : program_(std::move(program)), summary_(std::move(summary)), flags_(std::move(flags)) {
    for (const Flag& f : flags_)
      values_[f.name] = f.default_value;
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        usage(stdout);
        std::exit(0);
      }
      if (arg.rfind("--", 0) != 0) fail("unexpected argument '" + arg + "'");
      std::string name = arg.substr(2), value;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (is_switch(name)) {
        value = "1";
      } else {
        if (i + 1 >= argc) fail("--" + name + " needs a value");
        value = argv[++i];
      }
      if (!values_.count(name)) fail("unknown flag --" + name);
      values_[name] = value;
    }
    // A switch given a value takes only these: `--resume=yes` must not quietly mean off.
    for (const Flag& f : flags_)
      if (is_switch(f.name)) on(f.name);
  }

  std::string str(const std::string& name) const { return values_.at(name); }
  int64_t integer(const std::string& name) const {
    try {
      std::size_t used = 0;
      int64_t v = std::stoll(str(name), &used);
      if (used == str(name).size()) return v;
    } catch (...) {
    }
    fail("--" + name + " must be an integer, got '" + str(name) + "'");
  }
  double real(const std::string& name) const {
    try {
      std::size_t used = 0;
      double v = std::stod(str(name), &used);
      if (used == str(name).size()) return v;
    } catch (...) {
    }
    fail("--" + name + " must be a number, got '" + str(name) + "'");
  }
  /// A switch: `--name` or `--name=true|false|1|0`; any other value exits 2 naming it.
  bool on(const std::string& name) const {
    const std::string& v = values_.at(name);
    if (v == "1" || v == "true") return true;
    if (v == "0" || v == "false") return false;
    fail("--" + name + " is a switch: give --" + name + " or --" + name + "=true|false|1|0, not '" +
         v + "'");
  }

  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s (see --help)\n", program_.c_str(), why.c_str());
    std::exit(2);
  }

private:
  bool is_switch(const std::string& name) const {
    for (const Flag& f : flags_)
      if (f.name == name) return f.default_value == "0" && f.help.rfind("switch:", 0) == 0;
    return false;
  }
  void usage(std::FILE* to) const {
    std::fprintf(to, "usage: %s [flags]\n%s\n\nflags:\n", program_.c_str(), summary_.c_str());
    for (const Flag& f : flags_)
      std::fprintf(to, "  --%-16s %s (default: %s)\n", f.name.c_str(), f.help.c_str(),
                   f.default_value.empty() ? "none" : f.default_value.c_str());
  }

  std::string program_, summary_;
  std::vector<Flag> flags_;
  std::map<std::string, std::string> values_;
};

/// A progress line: step/total, steps per second, loss and ETA; redrawn in place on a
/// terminal, printed every few seconds otherwise.
class Progress {
public:
  /// `shown` false: counts time but prints nothing (ranks other than 0 of a job).
  explicit Progress(int64_t total, bool shown = true)
      : total_(total), tty_(isatty(2)), shown_(shown) {}

  /// `loss()` and `extra()` (shown before the ETA, e.g. "kept 0.334" while sifting) are called
  /// only when the line is printed: reading a GPU step's loss waits for the step.
  template <class Loss, class Extra>
  void update(int64_t step, const Loss& loss_of, const Extra& extra_of) {
    if (!shown_) return;
    auto now = std::chrono::steady_clock::now();
    double since_print = std::chrono::duration<double>(now - printed_).count();
    if (step < total_ && since_print < (tty_ ? 0.2 : 5.0)) return;
    const double loss = loss_of();
    const std::string extra = extra_of();
    printed_ = now;
    double elapsed = std::chrono::duration<double>(now - start_).count();
    double rate = step / std::max(elapsed, 1e-9);
    double eta = (total_ - step) / std::max(rate, 1e-9);
    std::fprintf(stderr, "%sstep %lld/%lld | %.1f step/s | loss %.4f | %s%sETA %.0fs%s",
                 tty_ ? "\r" : "", static_cast<long long>(step), static_cast<long long>(total_),
                 rate, loss, extra.c_str(), extra.empty() ? "" : " | ", eta, tty_ ? "   " : "\n");
    if (tty_ && step >= total_) std::fprintf(stderr, "\n");
  }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  /// Leaves `seconds` spent on something else (an evaluation) out of the training time.
  void leave_out(double seconds) {
    start_ += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(seconds));
  }

private:
  int64_t total_;
  bool tty_, shown_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point printed_ = start_;
};

} // namespace recipe
