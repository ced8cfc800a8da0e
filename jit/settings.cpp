// jit/settings.cpp — the table of SINTER_* variables, the compiler's settings parsed once, and
// the warning for a variable sinter does not read
#include "jit/settings.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

extern char** environ;

namespace sinter {
namespace {

using enum SettingScope;

constexpr SettingInfo table[] = {
    {"SINTER_NUM_THREADS", "count", "hardware threads", "threads for kernels on the CPU"},
    {"SINTER_CACHE_DIR", "path", "$XDG_CACHE_HOME/sinter, else ~/.cache/sinter",
     "the persistent kernel cache"},
    {"SINTER_BACKEND", "choice: cpu, interpreter", "cpu",
     "the default backend (the interpreter is the float64 reference)"},
    {"SINTER_DEVICE", "device: cpu, cuda, cuda:N, interpreter", "cpu",
     "the default device; wins over SINTER_BACKEND"},
    {"SINTER_LOG", "0 or 1", "1", "0 silences the compile lines"},
    {"SINTER_MEMORY_LIMIT", "bytes (K, M, G, T suffixes)", "unlimited",
     "the largest peak a training step may plan (sinter::OutOfMemory beyond it)"},
    {"SINTER_ATTENTION", "choice: fused, decomposed", "fused",
     "attention on fused kernels, or as GEMMs and a softmax"},
    {"SINTER_DUMP", "stage names, list, all", "off",
     "prints the graph or plan after each named stage; list: the stages a compile ran"},
    {"SINTER_COLLECTIVE_TIMEOUT", "seconds", "300", "how long a collective waits for the ranks"},
    {"SINTER_TIME_PHASES", "0 or 1", "0", "1 prints each compile stage's time as it ends"},
    {"SINTER_PROFILE", "path", "off", "profiles the run into this directory"},
    {"SINTER_CHECK_NUMERICS", "0 or 1", "0",
     "checks every kernel's outputs for NaN and infinity, naming the op"},
    {"SINTER_TF32", "0 or 1", "0", "cuda: f32 GEMMs may use TF32 tensor cores"},
    {"SINTER_CUDA_GRAPH", "0 or 1", "1", "cuda: steps are captured as CUDA graphs"},
    {"SINTER_LIBCUDA", "path", "libcuda.so.1", "cuda: the driver library"},
    {"SINTER_LIBDEVICE", "path", "found beside libsinter or the CUDA toolkit",
     "cuda: libdevice.10.bc"},
    {"SINTER_LIBNCCL", "path", "libnccl.so.2", "cuda: the NCCL library"},
    {"SINTER_FASHION_MNIST_DIR", "path", "/usr/share/datasets/fashion-mnist",
     "where the Fashion-MNIST loader looks"},
    {"SINTER_FORTUNES_DIR", "path", "/usr/share/games/fortunes",
     "where the text loader finds fortunes"},
    {"SINTER_KERNEL_PRELUDE", "path", "the installed prelude",
     "notebook: the precompiled DSL prelude (empty: parse it)", notebook},
    {"SINTER_KERNEL_TIMING", "0 or 1", "0", "notebook: prints the kernel's start-up phases",
     notebook},
    {"SINTER_REQUIRE_GPU", "0 or 1", "0", "tests: CUDA suites fail instead of skipping", tests},
    {"SINTER_REQUIRE_PTXAS", "0 or 1", "0", "tests: PTX suites fail instead of skipping", tests},
    {"SINTER_PTXAS", "path", "ptxas on PATH", "tests: the ptxas the PTX tests use", tests},
    {"SINTER_INTEROP_PYTHON", "path", "python3",
     "tests: the Python with numpy and safetensors for the interop test", tests},
    {"SINTER_INTEROP_REEXEC", "0 or 1", "0", "tests: set by the interop test for itself", tests},
};

} // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = above;
    }
  }
  return row[b.size()];
}

namespace {

const char* variable(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

Settings parse() {
  Settings s;
  s.dump = variable("SINTER_DUMP");
  s.time_phases = std::string_view(variable("SINTER_TIME_PHASES")) == "1";
  s.log = std::string_view(variable("SINTER_LOG")) != "0";
  return s;
}

std::mutex settings_mutex;
Settings* current = nullptr;

} // namespace

std::span<const SettingInfo> setting_table() { return table; }

const SettingInfo* find_setting(std::string_view name) {
  for (const SettingInfo& s : table)
    if (s.name == name) return &s;
  return nullptr;
}

std::string_view closest_setting(std::string_view name) {
  std::string_view best = table[0].name;
  std::size_t best_distance = edit_distance(name, best);
  for (const SettingInfo& s : table)
    if (std::size_t d = edit_distance(name, s.name); d < best_distance) {
      best = s.name;
      best_distance = d;
    }
  return best;
}

std::string unknown_settings_warning(char** environment) {
  std::string out;
  for (char** entry = environment; entry && *entry; ++entry) {
    std::string_view text(*entry);
    if (!text.starts_with("SINTER_")) continue;
    std::string_view name = text.substr(0, text.find('='));
    if (find_setting(name)) continue;
    out += "sinter: warning: " + std::string(name) + " is not a sinter setting (did you mean " +
           std::string(closest_setting(name)) + "?); the settings: docs/compiling.md\n";
  }
  return out;
}

const Settings& settings() {
  std::lock_guard lock(settings_mutex);
  if (!current) {
    current = new Settings(parse()); // never freed: read until the process ends
    if (std::string warning = unknown_settings_warning(environ); !warning.empty())
      std::fputs(warning.c_str(), stderr);
  }
  return *current;
}

void reload_settings() {
  Settings fresh = parse();
  std::lock_guard lock(settings_mutex);
  if (current)
    *current = std::move(fresh);
  else
    current = new Settings(std::move(fresh));
}

} // namespace sinter
