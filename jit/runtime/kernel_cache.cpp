// jit/runtime/kernel_cache.cpp — key hashing, the .sko entry format, atomic stores and validation
#include "jit/runtime/kernel_cache.hpp"
#include "jit/io/atomic_file.hpp"
#include "jit/settings.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sinter {
namespace {

namespace fs = std::filesystem;

// The on-disk header, little-endian, 48 bytes:
//   0 magic "SINTERK1" | 8 u32 version | 12 u32 header size | 16 u64 payload size
//   24 u64 checksum of the key and the payload | 32 u64 key.hi | 40 u64 key.lo
constexpr std::array<char, 8> entry_magic = {'S', 'I', 'N', 'T', 'E', 'R', 'K', '1'};
constexpr std::uint32_t entry_version = 2; ///< 2: the checksum covers the key too
constexpr std::size_t header_size = 48;
constexpr std::string_view entry_extension = ".sko";
constexpr std::string_view temp_marker = ".tmp-";

std::uint64_t fmix64(std::uint64_t k) { // MurmurHash3's finalizer
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  return k ^ (k >> 33);
}

std::uint64_t splitmix64(std::uint64_t z) { // SplitMix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t read_le64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
std::uint32_t read_le32(const char* p) { return static_cast<std::uint32_t>(read_le64(p)); }

void write_le(char* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Word-at-a-time over the payload; objects are tens of kilobytes, so this is not a hot path.
// The key is covered too: a payload copied under another key with its key field rewritten
// must not load as that kernel.
std::uint64_t entry_checksum(const CacheKey& key, std::span<const char> payload) {
  KeyHasher h;
  h.add(key.hi);
  h.add(key.lo);
  h.add(std::string_view(payload.data(), payload.size()));
  CacheKey k = h.finish();
  return k.hi ^ k.lo;
}

std::array<char, header_size> make_header(const CacheKey& key, std::span<const char> payload) {
  std::array<char, header_size> h{};
  std::copy(entry_magic.begin(), entry_magic.end(), h.begin());
  write_le(h.data() + 8, entry_version, 4);
  write_le(h.data() + 12, header_size, 4);
  write_le(h.data() + 16, payload.size(), 8);
  write_le(h.data() + 24, entry_checksum(key, payload), 8);
  write_le(h.data() + 32, key.hi, 8);
  write_le(h.data() + 40, key.lo, 8);
  return h;
}

/// Why `file` is not a valid entry for `key`, or an empty string when it is.
std::string validate_entry(std::span<const char> file, const CacheKey& key) {
  if (file.size() < header_size)
    return "truncated: " + std::to_string(file.size()) + " bytes, shorter than the " +
           std::to_string(header_size) + "-byte header";
  if (!std::equal(entry_magic.begin(), entry_magic.end(), file.begin())) return "bad magic";
  std::uint32_t version = read_le32(file.data() + 8);
  if (version != entry_version)
    return "format version " + std::to_string(version) + ", expected " +
           std::to_string(entry_version);
  if (read_le32(file.data() + 12) != header_size) return "bad header size";
  std::uint64_t payload_size = read_le64(file.data() + 16);
  if (payload_size != file.size() - header_size)
    return "size mismatch: header says " + std::to_string(payload_size) +
           " payload bytes, file has " + std::to_string(file.size() - header_size);
  CacheKey stored{read_le64(file.data() + 32), read_le64(file.data() + 40)};
  if (stored != key) return "key mismatch: header names " + stored.hex();
  if (read_le64(file.data() + 24) != entry_checksum(stored, file.subspan(header_size)))
    return "checksum mismatch";
  return {};
}

bool read_all(int fd, std::vector<char>& into) {
  std::size_t used = 0;
  for (;;) {
    if (used == into.size()) into.resize(std::max<std::size_t>(into.size() * 2, 4096));
    ssize_t n = ::read(fd, into.data() + used, into.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  into.resize(used);
  return true;
}

bool is_temp_name(const std::string& name) { return name.find(temp_marker) != std::string::npos; }

const char* nonempty_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

} // namespace

// ---- CacheKey / KeyHasher ----------------------------------------------------------------

std::string CacheKey::hex() const {
  char text[33];
  std::snprintf(text, sizeof text, "%016" PRIx64 "%016" PRIx64, hi, lo);
  return text;
}

void KeyHasher::mix(std::uint64_t word) {
  a_ = fmix64(a_ ^ word) + 0x9e3779b97f4a7c15ull;
  b_ = splitmix64(std::rotl(b_, 29) + word * 0xd6e8feb86659fd93ull);
  ++words_;
}

// Kind tags keep add(1) and add_double(x) with the same bits apart.
void KeyHasher::add(std::uint64_t value) {
  mix(0x75363421);
  mix(value);
}

void KeyHasher::add(std::string_view text) {
  mix(0x73747221);
  mix(text.size());
  std::size_t i = 0;
  for (; i + 8 <= text.size(); i += 8)
    mix(read_le64(text.data() + i));
  if (i < text.size()) {
    char tail[8] = {};
    std::memcpy(tail, text.data() + i, text.size() - i);
    mix(read_le64(tail));
  }
}

void KeyHasher::add_double(double value) {
  mix(0x66363421);
  mix(std::isnan(value) ? 0x7ff8000000000000ull : std::bit_cast<std::uint64_t>(value));
}

CacheKey KeyHasher::finish() const {
  return {fmix64(a_ ^ (words_ * 0xa0761d6478bd642full)), splitmix64(b_ + words_)};
}

// ---- KernelCache --------------------------------------------------------------------------

KernelCache::KernelCache(fs::path dir) : dir_(std::move(dir)) {}

fs::path KernelCache::default_dir() {
  if (const char* dir = setting("SINTER_CACHE_DIR"); dir != nullptr && *dir != '\0') return dir;
  // The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
  if (const char* xdg = nonempty_env("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/')
    return fs::path(xdg) / "sinter";
  if (const char* home = nonempty_env("HOME")) return fs::path(home) / ".cache" / "sinter";
  return fs::temp_directory_path() / ("sinter-cache-" + std::to_string(::getuid()));
}

fs::path KernelCache::entry_path(const CacheKey& key) const {
  return dir_ / (key.hex() + std::string(entry_extension));
}

std::optional<std::vector<char>> KernelCache::load(const CacheKey& key) {
  fs::path path = entry_path(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  struct stat opened{};
  std::vector<char> file;
  bool read_ok = ::fstat(fd, &opened) == 0;
  if (read_ok) file.resize(static_cast<std::size_t>(opened.st_size) + 1);
  read_ok = read_ok && read_all(fd, file);
  ::close(fd);
  if (!read_ok) { // an I/O error is not evidence of corruption: leave the file alone
    misses_.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  std::string problem = validate_entry(file, key);
  if (problem.empty()) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    file.erase(file.begin(), file.begin() + header_size);
    return file;
  }
  report_corrupt(path, problem);
  // NOTE: another process may have renamed a fresh entry over the bad one since we opened it;
  // delete only the file we actually read.
  struct stat now{};
  if (::stat(path.c_str(), &now) == 0 && now.st_ino == opened.st_ino && now.st_dev == opened.st_dev)
    ::unlink(path.c_str());
  corrupt_.fetch_add(1, std::memory_order_relaxed);
  misses_.fetch_add(1, std::memory_order_relaxed);
  return std::nullopt;
}

void KernelCache::report_corrupt(const fs::path& path, std::string_view reason) {
  std::fprintf(stderr, "sinter: kernel cache entry %s is corrupt (%.*s); recompiling\n",
               path.c_str(), static_cast<int>(reason.size()), reason.data());
}

void KernelCache::disable(const std::string& why) {
  if (disabled_.exchange(true)) return;
  std::fprintf(stderr,
               "sinter: kernel cache directory %s is not writable (%s); kernel caching is "
               "disabled for this process (set SINTER_CACHE_DIR to a writable directory)\n",
               dir_.c_str(), why.c_str());
}

bool KernelCache::write_atomically(const fs::path& final_path, std::span<const char> header,
                                   std::span<const char> payload) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    disable("cannot create it: " + ec.message());
    return false;
  }
  // The temporary file's name holds temp_marker, so clear() removes one a crash left behind.
  const std::string_view pieces[] = {{header.data(), header.size()},
                                     {payload.data(), payload.size()}};
  try {
    write_file_atomically(final_path, pieces);
    return true;
  } catch (const std::runtime_error& e) {
    disable(e.what());
    return false;
  }
}

void KernelCache::store(const CacheKey& key, std::span<const char> object) {
  if (disabled_.load(std::memory_order_relaxed)) return;
  std::array<char, header_size> header = make_header(key, object);
  write_atomically(entry_path(key), header, object);
}

KernelCache::Stats KernelCache::stats() const {
  Stats stats;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    if (path.extension() != entry_extension || !it->is_regular_file(ec)) continue;
    std::uintmax_t size = it->file_size(ec);
    if (ec) {
      ec.clear(); // removed by another process meanwhile
      continue;
    }
    ++stats.entries;
    stats.bytes += size;
  }
  return stats;
}

std::size_t KernelCache::clear() {
  std::vector<fs::path> entries, temps;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    if (path.extension() == entry_extension)
      entries.push_back(path);
    else if (is_temp_name(path.filename().string()))
      temps.push_back(path);
  }
  std::size_t removed = 0;
  for (const fs::path& path : entries)
    removed += fs::remove(path, ec) ? 1 : 0;
  for (const fs::path& path : temps)
    fs::remove(path, ec);
  return removed;
}

KernelCache::Counters KernelCache::counters() const {
  return {hits_.load(), misses_.load(), corrupt_.load(), compiled_.load()};
}

void KernelCache::record_run_stats() {
  if (disabled_.load(std::memory_order_relaxed)) return;
  Counters c = counters();
  char line[160];
  int n = std::snprintf(line, sizeof line,
                        "hits=%" PRIu64 " misses=%" PRIu64 " corrupt=%" PRIu64 " compiled=%" PRIu64
                        "\n",
                        c.hits, c.misses, c.corrupt, c.compiled);
  write_atomically(dir_ / "last-run.txt", std::span<const char>(line, static_cast<std::size_t>(n)),
                   {});
}

std::optional<std::string> KernelCache::last_run() const {
  int fd = ::open((dir_ / "last-run.txt").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::vector<char> text;
  bool ok = read_all(fd, text);
  ::close(fd);
  if (!ok) return std::nullopt;
  std::string line(text.begin(), text.end());
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
    line.pop_back();
  return line;
}

} // namespace sinter
