// recipes/recipe_support.hpp — what every recipe shares: flags, progress line, result line
#pragma once
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace recipe {

struct Flag {
  std::string name, default_value, help;
};

/// The values a numeric flag takes (from `min` to `max`, `min` itself excluded where
/// `above_min`), whichever recipe has it. Every recipe checks its flags against these when it
/// starts, so a value out of range stops it (exit 2) naming the flag, before any work.
struct FlagRange {
  double min, max;
  bool integer = true, above_min = false;
};
inline const std::map<std::string, FlagRange>& flag_ranges() {
  constexpr double steps = 1e12, big = 1e9;
  static const std::map<std::string, FlagRange> ranges = {
      {"steps", {0, steps}},
      {"stop-after", {0, steps}},
      {"teacher-steps", {0, steps}},
      {"check-every", {0, steps}},
      {"sift-delay", {0, steps}},
      {"epochs", {0, 1e6}},
      {"teacher-epochs", {0, 1e6}},
      {"seed", {0, 9.2e18}},
      {"batch-size", {1, big}}, // or `max`
      {"sift-scored-batch", {0, big}},
      {"sift-history", {1, big}},
      {"sample-bytes", {0, big}},
      {"threads", {0, 4096}},
      {"loader-threads", {0, 64}},
      {"zero", {0, 2}},
      {"dim", {1, 65536}},
      {"teacher-dim", {1, 65536}},
      {"heads", {1, 4096}},
      {"teacher-heads", {1, 4096}},
      {"depth", {0, 4096}},
      {"teacher-depth", {0, 4096}},
      {"context", {1, 1 << 20}},
      {"patch", {1, 28}},
      {"teacher-patch", {1, 28}},
      {"lr", {0, 10, false}},
      {"weight-decay", {0, 10, false}},
      {"clip", {0, 1e12, false}}, // 0: off
      {"alpha", {0, 1, false}},
      {"temperature", {0, 1e6, false, true}},
      {"sift-beta", {0, 1e6, false}}, // 0: off
      {"bucket-mb", {0, 1e6, false, true}},
      {"collective-timeout", {1e-3, 1e7, false}},
      {"log-every", {1, steps}},
  };
  return ranges;
}

/// A flag the recipe cannot take: what Flags::checked throws (a recipe's Flags prints it and
/// exits 2).
struct FlagError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// `--name value` or `--name=value` flags with defaults; `--help` prints them and exits 0; an
/// unknown flag or a bad value exits 2 with a message saying what to do.
class Flags {
public:
  Flags(std::string program, std::string summary, std::vector<Flag> flags, int argc, char** argv)
      : Flags(std::move(program), std::move(summary), std::move(flags)) {
    try {
      if (parse(std::vector<std::string>(argv + 1, argv + argc))) {
        usage(stdout);
        std::exit(0);
      }
    } catch (const FlagError& e) {
      fail(e.what());
    }
  }
  /// The same checks without exiting (tests, fuzzing): `args` (no program name) parsed and
  /// every switch and number checked; throws FlagError naming the flag. `--help` is only noted.
  static Flags checked(std::string program, std::string summary, std::vector<Flag> flags,
                       const std::vector<std::string>& args) {
    Flags parsed(std::move(program), std::move(summary), std::move(flags));
    parsed.help_asked_ = parsed.parse(args);
    return parsed;
  }

  std::string str(const std::string& name) const { return values_.at(name); }
  /// Whether this recipe has flag `name`.
  bool has(const std::string& name) const { return values_.contains(name); }
  /// Every flag this recipe takes, in --help's order.
  const std::vector<Flag>& all() const { return flags_; }
  /// Whether `--help` was among the arguments (Flags::checked; the recipes exit 0 on it).
  bool help_asked() const { return help_asked_; }
  /// The flag's whole value as an integer in its range (flag_ranges); otherwise exits 2.
  int64_t integer(const std::string& name) const {
    return or_exit<int64_t>([&] { return checked_integer(name); });
  }
  /// The flag's whole value as a finite number in its range (flag_ranges); otherwise exits 2.
  double real(const std::string& name) const {
    return or_exit<double>([&] { return checked_real(name); });
  }
  /// A switch: `--name` or `--name=true|false|1|0`; any other value exits 2 naming it.
  bool on(const std::string& name) const {
    return or_exit<bool>([&] { return checked_switch(name); });
  }
  /// As integer(), real() and on(), throwing FlagError instead of exiting.
  int64_t checked_integer(const std::string& name) const {
    const std::string& text = str(name);
    int64_t v =
        whole_value<int64_t>(name, text, "an integer", [](const std::string& t, std::size_t* used) {
          return std::stoll(t, used);
        });
    check_range(name, static_cast<double>(v), text);
    return v;
  }
  double checked_real(const std::string& name) const {
    const std::string& text = str(name);
    double v =
        whole_value<double>(name, text, "a number", [](const std::string& t, std::size_t* used) {
          return std::stod(t, used);
        });
    if (!std::isfinite(v))
      throw FlagError("--" + name + " must be a finite number, got '" + text + "'");
    check_range(name, v, text);
    return v;
  }
  bool checked_switch(const std::string& name) const {
    const std::string& v = values_.at(name);
    if (v == "1" || v == "true") return true;
    if (v == "0" || v == "false") return false;
    throw FlagError("--" + name + " is a switch: give --" + name + " or --" + name +
                    "=true|false|1|0, not '" + v + "'");
  }

  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s (see --help)\n", program_.c_str(), why.c_str());
    std::exit(2);
  }

private:
  Flags(std::string program, std::string summary, std::vector<Flag> flags)
      : program_(std::move(program)), summary_(std::move(summary)), flags_(std::move(flags)) {
    for (const Flag& f : flags_)
      values_[f.name] = f.default_value;
  }
  /// Reads `args` into the values and checks them; true when `--help` was asked for.
  bool parse(const std::vector<std::string>& args) {
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (arg == "--help" || arg == "-h") return true;
      if (arg.rfind("--", 0) != 0) throw FlagError("unexpected argument '" + arg + "'");
      std::string name = arg.substr(2), value;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else if (is_switch(name)) {
        value = "1";
      } else {
        if (i + 1 >= args.size()) throw FlagError("--" + name + " needs a value");
        value = args[++i];
      }
      if (!values_.count(name)) throw FlagError("unknown flag --" + name);
      values_[name] = value;
    }
    // A switch given a value takes only these: `--resume=yes` must not quietly mean off.
    for (const Flag& f : flags_)
      if (is_switch(f.name)) checked_switch(f.name);
    // Numbers are read whole and checked against their range now, before any work.
    for (const Flag& f : flags_) {
      auto range = flag_ranges().find(f.name);
      const std::string& v = values_[f.name];
      if (range == flag_ranges().end() || v.empty() || (f.name == "batch-size" && v == "max"))
        continue;
      if (range->second.integer)
        checked_integer(f.name);
      else
        checked_real(f.name);
    }
    return false;
  }
  /// `text` read whole by `read` (std::stoll, std::stod); anything else throws FlagError
  /// saying the flag takes `what`.
  template <class T, class Read>
  static T whole_value(const std::string& name, const std::string& text, const char* what,
                       const Read& read) {
    try {
      std::size_t used = 0;
      auto v = read(text, &used);
      if (used == text.size()) return v;
    } catch (const std::logic_error&) { // std::invalid_argument, std::out_of_range
    }
    throw FlagError("--" + name + " must be " + what + ", got '" + text + "'");
  }
  template <class T, class Read> T or_exit(const Read& read) const {
    try {
      return read();
    } catch (const FlagError& e) {
      fail(e.what());
    }
  }
  void check_range(const std::string& name, double v, const std::string& text) const {
    auto found = flag_ranges().find(name);
    if (found == flag_ranges().end()) return;
    const FlagRange& r = found->second;
    if (v < r.min || v > r.max || (r.above_min && v == r.min)) {
      auto number = [](double x) {
        char out[32];
        std::snprintf(out, sizeof out, "%.10g", x);
        return std::string(out);
      };
      throw FlagError("--" + name + " must be " + (r.above_min ? "above " : "from ") +
                      number(r.min) + (r.above_min ? " and at most " : " to ") + number(r.max) +
                      ", got '" + text + "'");
    }
  }
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
  bool help_asked_ = false;
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
