// tests/fuzz/fuzz_support.hpp — what the libFuzzer targets share: a scratch folder, inputs
// written as files, several files in one input, and the check that a refusal names its input
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace sinter::fuzz {

/// This process's own folder under $TMPDIR (several fuzzing jobs run side by side), emptied
/// and removed when the process exits normally.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
                              ("sinter-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch(), ignored);
    });
    return d;
  }();
  return dir;
}

/// `bytes` as the whole of file `name` in the scratch folder (the loaders read files: the
/// fuzzer reaches them the way a user's file does).
inline std::filesystem::path as_file(const std::string& name, std::string_view bytes) {
  std::filesystem::path file = scratch() / name;
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", file.c_str());
    std::abort();
  }
  return file;
}

/// One input holding several files: the parts between separator lines.
constexpr std::string_view part_separator = "\n%%sinter-fuzz-file%%\n";

inline std::vector<std::string_view> parts(const uint8_t* data, std::size_t size,
                                           std::size_t most) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> out;
  while (out.size() + 1 < most) {
    std::size_t at = all.find(part_separator);
    if (at == std::string_view::npos) break;
    out.push_back(all.substr(0, at));
    all.remove_prefix(at + part_separator.size());
  }
  out.push_back(all);
  return out;
}

/// A finding: every refusal must name what it refused (a file, a tensor, a flag), so that the
/// user knows what to fix. Aborts (libFuzzer saves the input) when `message` names none of
/// `names`.
inline void require_named(std::string_view message, const std::vector<std::string>& names) {
  for (const std::string& name : names)
    if (message.find(name) != std::string_view::npos) return;
  std::fprintf(stderr, "fuzz: a refusal that names none of what it refused:\n  %.*s\n",
               static_cast<int>(message.size()), message.data());
  std::abort();
}

} // namespace sinter::fuzz
