// jit/settings.hpp — every SINTER_* environment variable in one table, and the parsed settings
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sinter {

/// One environment variable sinter reads.
struct SettingInfo {
  std::string_view name;     ///< SINTER_...
  std::string_view type;     ///< the values it takes: `0`, `1`; path; seconds; choices
  std::string_view fallback; ///< what applies when the variable is unset
  std::string_view meaning;  ///< `notebook:` and `tests:` mark what only those read
};

/// Every SINTER_* variable, in the order docs/compiling.md's table lists them (a test checks
/// the docs against it).
std::span<const SettingInfo> setting_table();
/// The entry of `name`, or null for a variable sinter does not read.
const SettingInfo* find_setting(std::string_view name);
/// The listed variable nearest to `name` by edit distance (for "did you mean").
std::string_view closest_setting(std::string_view name);

/// The table as docs/compiling.md shows it (markdown; `sinter settings` prints it).
std::string settings_markdown();

/// Levenshtein distance between two names (what "did you mean" picks by).
std::size_t edit_distance(std::string_view a, std::string_view b);
/// The name of the item of `items` nearest to `name` by edit distance (the first of equals);
/// `name_of` gives an item's name. `items` is not empty.
template <class Items, class NameOf>
std::string_view closest_name(std::string_view name, const Items& items, NameOf name_of) {
  std::string_view best;
  std::size_t best_distance = 0;
  for (const auto& item : items) {
    std::string_view candidate = name_of(item);
    std::size_t distance = edit_distance(name, candidate);
    if (best.empty() || distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

/// The environment's SINTER_* variables, read once, and the ones the compiler reads on every
/// compile, parsed.
struct Settings {
  std::string dump;         ///< SINTER_DUMP: comma-separated stage names, `list`, `all`
  bool time_phases = false; ///< SINTER_TIME_PHASES=1
  bool log = true;          ///< SINTER_LOG (0: no compile lines)
  /// Every listed variable that was set, by name.
  std::vector<std::pair<std::string, std::string>> values;
};
/// The parsed settings. The first call also warns once, on stderr, about each SINTER_*
/// variable in the environment that the table does not list, naming the closest one.
const Settings& settings();
/// Parses the environment again (for tests that change a variable mid-process).
void reload_settings();
/// The value of variable `name` when it was read (settings()), or null when it was unset.
/// Each place that reads a setting parses and checks its value itself, with an error naming
/// the variable. std::logic_error for a name the table does not list.
const char* setting(std::string_view name);
/// A `0`/`1` setting: `fallback` when unset; std::invalid_argument naming the variable for any
/// other value.
bool switch_setting(std::string_view name, bool fallback);
/// The warning for the SINTER_* variables in `environment` (null-terminated, like environ)
/// that the table does not list: one line each, empty when all are known.
std::string unknown_settings_warning(char** environment);

} // namespace sinter
