// tests/env_override.hpp — sets or unsets an environment variable for one scope
#pragma once
#include "jit/settings.hpp"

#include <cstdlib>
#include <optional>
#include <string>

namespace sinter::testing {

/// Sets (or unsets, with nullopt) an environment variable and restores it at scope exit;
/// sinter's settings (jit/settings.hpp) are parsed again each time.
struct EnvOverride {
  std::string name;
  std::optional<std::string> saved;
  EnvOverride(std::string variable, std::optional<std::string> value) : name(std::move(variable)) {
    if (const char* old = std::getenv(name.c_str())) saved = old;
    if (value)
      ::setenv(name.c_str(), value->c_str(), 1);
    else
      ::unsetenv(name.c_str());
    reload_settings();
  }
  ~EnvOverride() {
    if (saved)
      ::setenv(name.c_str(), saved->c_str(), 1);
    else
      ::unsetenv(name.c_str());
    reload_settings();
  }
  EnvOverride(const EnvOverride&) = delete;
  EnvOverride& operator=(const EnvOverride&) = delete;
};

} // namespace sinter::testing
