// jit/runtime/kernel_cache.hpp — KernelCache: the persistent, validated object-file cache
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sinter {

/// A 128-bit kernel identity; the same inputs give the same key in every process and run.
struct CacheKey {
  std::uint64_t hi = 0, lo = 0;
  /// 32 lowercase hex digits, `hi` first; also the entry's file name.
  std::string hex() const;
  bool operator==(const CacheKey&) const = default;
};

/// A stable, non-cryptographic 128-bit hash (two independent 64-bit mixing streams).
/// Each add() is tagged with its kind and strings with their length, so ("ab","c") and
/// ("a","bc") differ. Never uses std::hash or pointer values.
class KeyHasher {
public:
  void add(std::uint64_t value);
  void add(std::string_view text);
  /// Hashes the bit pattern; -0.0 and 0.0 differ, every NaN hashes alike.
  void add_double(double value);
  CacheKey finish() const;

private:
  void mix(std::uint64_t word);
  std::uint64_t a_ = 0x243f6a8885a308d3ull; // pi digits: arbitrary, fixed forever
  std::uint64_t b_ = 0x13198a2e03707344ull;
  std::uint64_t words_ = 0;
};

/// One file per kernel, `<dir>/<hex>.sko`: a header (magic SINTERK1, format version, payload
/// size, payload checksum, key) and the object bytes. Stores are atomic (temp file + fsync +
/// rename), so several processes may share a directory. A load never returns bytes that fail
/// validation: a corrupt entry is reported on stderr, deleted, and treated as a miss.
/// Safe to use from several threads.
class KernelCache {
public:
  /// Touches nothing on disk; the directory is created by the first store().
  explicit KernelCache(std::filesystem::path dir);
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  /// `$SINTER_CACHE_DIR`, else `$XDG_CACHE_HOME/sinter`, else `$HOME/.cache/sinter`.
  static std::filesystem::path default_dir();
  const std::filesystem::path& dir() const { return dir_; }
  /// The file an entry for `key` lives in.
  std::filesystem::path entry_path(const CacheKey& key) const;

  /// The validated object for `key`, or nullopt (missing, or corrupt and now deleted).
  std::optional<std::vector<char>> load(const CacheKey& key);
  /// Writes the entry atomically. An unwritable directory disables storing for this object
  /// (one warning on stderr); it never throws for I/O problems.
  void store(const CacheKey& key, std::span<const char> object);
  /// Whether store() still writes (false after the directory proved unwritable).
  bool enabled() const { return !disabled_.load(std::memory_order_relaxed); }

  struct Stats {
    std::size_t entries = 0;
    std::uint64_t bytes = 0;
  };
  /// The `.sko` files on disk now (all processes' entries), and their total size.
  Stats stats() const;
  /// Removes every `.sko` entry and leftover temp file; returns how many entries were removed.
  std::size_t clear();

  /// This process's counters. Every load() is a hit or a miss; `corrupt` counts the misses
  /// that found (and deleted) a bad entry.
  struct Counters {
    std::uint64_t hits = 0, misses = 0, corrupt = 0, compiled = 0;
  };
  Counters counters() const;
  /// The code generator calls this once per kernel it had to compile.
  void note_compiled() { compiled_.fetch_add(1, std::memory_order_relaxed); }
  /// Writes `<dir>/last-run.txt` (atomically): `hits=N misses=N corrupt=N compiled=N`.
  void record_run_stats();
  /// The text `sinter cache stats` shows: `<dir>/last-run.txt` without its newline, if any.
  std::optional<std::string> last_run() const;

private:
  void report_corrupt(const std::filesystem::path& path, std::string_view reason);
  bool write_atomically(const std::filesystem::path& final_path, std::span<const char> header,
                        std::span<const char> payload);
  void disable(const std::string& why);

  std::filesystem::path dir_;
  std::atomic<bool> disabled_{false};
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, corrupt_{0}, compiled_{0};
};

} // namespace sinter
