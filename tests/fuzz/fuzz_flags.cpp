// tests/fuzz/fuzz_flags.cpp — libFuzzer target: command lines through the recipes' flag parser,
// with every flag that has a range, a switch and a text flag
#include "fuzz_support.hpp"
#include "recipes/recipe_support.hpp"

#include <cmath>

namespace {

std::vector<recipe::Flag> every_kind_of_flag() {
  std::vector<recipe::Flag> flags;
  for (const auto& [name, range] : recipe::flag_ranges())
    flags.push_back({name, range.integer ? "1" : "0.5", "a number"});
  flags.push_back({"resume", "0", "switch: continue from the checkpoint"});
  flags.push_back({"check-numerics", "0", "switch: stop at the first inf or NaN"});
  flags.push_back({"checkpoint-dir", "", "a folder"});
  return flags;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace sinter;
  // The arguments are the input's NUL-separated pieces, as a shell hands them over.
  std::vector<std::string> args;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (!rest.empty() && args.size() < 64) {
    std::size_t end = rest.find('\0');
    args.emplace_back(rest.substr(0, end));
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
  }
  static const std::vector<recipe::Flag> flags = every_kind_of_flag();
  try {
    recipe::Flags parsed = recipe::Flags::checked("fuzz", "every kind of flag", flags, args);
    if (parsed.help_asked()) return 0;
    // Accepted: every number is whole, finite and in its range, every switch a truth value.
    for (const auto& [name, range] : recipe::flag_ranges()) {
      if (name == "batch-size" && parsed.str(name) == "max") continue;
      const double v = range.integer ? static_cast<double>(parsed.checked_integer(name))
                                     : parsed.checked_real(name);
      if (!std::isfinite(v) || v < range.min || v > range.max) std::abort();
    }
    parsed.checked_switch("resume");
    parsed.checked_switch("check-numerics");
  } catch (const recipe::FlagError& e) {
    // A refusal names the flag (or the stray argument) it refused.
    std::vector<std::string> named;
    for (const std::string& arg : args)
      named.push_back(arg.substr(0, arg.find('=')));
    for (const recipe::Flag& f : flags)
      named.push_back("--" + f.name);
    fuzz::require_named(e.what(), named);
  }
  return 0;
}
