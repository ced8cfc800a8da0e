// tests/temp_dir.hpp — TempDir: a fresh directory per test, removed with its contents
#pragma once
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace sinter::testing {

/// A new directory from mkdtemp under the system temp dir; removed at scope exit, even if a
/// test made it read-only.
struct TempDir {
  std::filesystem::path path;

  explicit TempDir(const std::string& tag = "sinter-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / (tag + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed for " + pattern);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ignored);
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

} // namespace sinter::testing
