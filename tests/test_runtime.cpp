// tests/test_runtime.cpp — the runtime: ThreadPool, thread-count parsing, KernelCache, Context
#include "jit/api.hpp"
#include "jit/backend/context.hpp"
#include "jit/backend/cpu/thread_pool.hpp"
#include "jit/ir/half.hpp"
#include "jit/runtime/host_tensor.hpp"
#include "jit/runtime/kernel_cache.hpp"

#include "capture_stderr.hpp"
#include "env_override.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

using namespace sinter;
using sinter::testing::capture_stderr;
using sinter::testing::EnvOverride;
using sinter::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<char> bytes_of(std::string_view text) { return {text.begin(), text.end()}; }

CacheKey key_named(std::string_view name) {
  KeyHasher h;
  h.add(name);
  return h.finish();
}

std::size_t count_lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

std::vector<std::string> file_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.push_back(entry.path().filename());
  return names;
}

/// Rewrites one byte of a file in place.
void flip_byte(const fs::path& file, std::uintmax_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x5a));
}

} // namespace

// ---- ThreadPool -------------------------------------------------------------------------

namespace {
/// Resident memory of this process in bytes (Linux: /proc/self/statm, field 2, in pages).
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t total = 0, resident = 0;
  statm >> total >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}
} // namespace

TEST_CASE("a tensor costs resident memory only once it is written", "[runtime]") {
  // A GPU step's deferred results and freshly made outputs must not fill host RAM (GPT-2
  // small has 2 GB of parameters and optimizer state per copy).
  constexpr int64_t elements = 64 << 20; // 256 MiB of f32
  std::size_t before = resident_bytes();
  HostTensor t(DType::f32, {elements});
  std::size_t made = resident_bytes();
  CHECK(made - std::min(made, before) < (32u << 20));
  CHECK(t.at(elements - 1) == 0.0); // zero-filled all the same
  auto bytes = t.bytes();
  std::fill(bytes.begin(), bytes.end(), std::byte{1});
  CHECK(resident_bytes() - made > (200u << 20));
}

namespace {
/// A deferred value that fills what it is asked for with one byte.
struct FilledBytes final : DeferredBytes {
  std::byte value;
  explicit FilledBytes(std::byte v) : value(v) {}
  void fetch(std::span<std::byte> into) const override {
    std::fill(into.begin(), into.end(), value);
  }
};
} // namespace

TEST_CASE("a tensor whose value is deferred gives its old pages back until it is read",
          "[runtime]") {
  // A GPU step's parameters and optimizer state: once they live on the device, the host
  // copies they replaced must not stay resident (GPT-2 small: 1.9 GB).
  constexpr int64_t elements = 64 << 20; // 256 MiB of f32
  HostTensor t(DType::f32, {elements});
  auto bytes = t.bytes();
  std::fill(bytes.begin(), bytes.end(), std::byte{1});
  std::size_t written = resident_bytes();
  t.defer(std::make_shared<FilledBytes>(std::byte{2}));
  std::size_t deferred = resident_bytes();
  CHECK(written - std::min(written, deferred) > (200u << 20));
  CHECK(t.bytes()[static_cast<std::size_t>(elements) * 4 - 1] == std::byte{2}); // read: fetched
}

TEST_CASE("a tensor too large for the host, or of an impossible shape, is refused by name",
          "[runtime]") {
  // 2^50 bytes: more than a 47-bit user address space maps.
  CHECK_THROWS_MATCHES(HostTensor(DType::f32, {int64_t{1} << 48}), HostAllocationError,
                       Catch::Matchers::Message(
                           "sinter: cannot allocate 1048576.0 GiB of host memory for a "
                           "f32[281474976710656] tensor; check the sizes the model or batch was "
                           "built with"));
  // A bad_alloc still, for code that explains running out of memory.
  CHECK_THROWS_AS(HostTensor(DType::f32, {int64_t{1} << 48}), std::bad_alloc);
  CHECK_THROWS_WITH(HostTensor(DType::f32, {int64_t{1} << 40, int64_t{1} << 40}),
                    Catch::Contains("more bytes than a 64-bit size holds"));
  CHECK_THROWS_WITH(HostTensor(DType::f32, {3, -1}), Catch::Contains("negative dim"));
  CHECK_THROWS_WITH(numel({int64_t{1} << 40, int64_t{1} << 40}),
                    Catch::Contains("[1099511627776,1099511627776] has more elements"));
  CHECK(numel({int64_t{1} << 30, int64_t{1} << 30}) == int64_t{1} << 60);
}

TEST_CASE("a borrowed tensor reads the original's bytes and stamp without copying them",
          "[runtime]") {
  HostTensor original = HostTensor::from_doubles(DType::f32, {3}, std::vector<double>{1, 2, 3});
  {
    const HostTensor borrowed = HostTensor::borrow(original);
    CHECK(borrowed.bytes().data() == std::as_const(original).bytes().data());
    CHECK(borrowed.stamp() == original.stamp());
    CHECK(borrowed.shape() == original.shape());
    CHECK(borrowed.at(2) == 3.0);
    HostTensor copy = borrowed; // a copy owns its bytes
    CHECK(copy.bytes().data() != std::as_const(original).bytes().data());
    CHECK(copy.at(1) == 2.0);
  }
  CHECK(original.at(0) == 1.0); // the borrowed tensor freed nothing
  original.set(0, 5.0);
  CHECK(original.at(0) == 5.0);
}

TEST_CASE("f16 and bf16 conversions are exact both ways and round like the op semantics",
          "[runtime]") {
  // Every f16 value survives f16 -> f32 -> f16 (NaNs stay NaN), and widening is exact.
  int mismatches = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    auto bits = static_cast<uint16_t>(h);
    float f = f16_value(bits);
    bool nan = ((bits >> 10) & 0x1f) == 0x1f && (bits & 0x3ff) != 0;
    if (nan ? !std::isnan(f) : f16_bits(f) != bits) ++mismatches;
  }
  CHECK(mismatches == 0);
  CHECK(f16_value(0x3c00) == 1.0f);
  CHECK(f16_value(0x0001) == std::ldexp(1.0f, -24)); // smallest subnormal
  CHECK(f16_value(0x7bff) == 65504.0f);
  // Rounding matches ops' round_to_dtype (an independent definition) over the whole range:
  // normal, subnormal, ties, overflow.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> exponent(-30.0, 17.0);
  std::uniform_int_distribution<int> sign(0, 1);
  for (int i = 0; i < 200000 && mismatches < 10; ++i) {
    auto v = static_cast<float>((sign(rng) ? -1.0 : 1.0) * std::exp2(exponent(rng)));
    if (f16_value(f16_bits(v)) != static_cast<float>(round_to_dtype(v, DType::f16))) {
      ++mismatches;
      INFO(v);
    }
    if (bf16_value(bf16_bits(v)) != static_cast<float>(round_to_dtype(v, DType::bf16)))
      ++mismatches;
  }
  // Ties to even, with odd and even lower neighbours, normal and subnormal.
  for (float tie : {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65520.0f, 65519.0f,
                    std::ldexp(3.0f, -25), std::ldexp(5.0f, -25), std::ldexp(3.0f, -26)})
    CHECK(f16_value(f16_bits(tie)) == static_cast<float>(round_to_dtype(tie, DType::f16)));
  CHECK(mismatches == 0);
  CHECK(std::isinf(f16_value(f16_bits(1e6f))));
  CHECK(std::isnan(f16_value(f16_bits(NAN))));
}

TEST_CASE("parallel_for covers every index exactly once in chunks of at least min_chunk",
          "[runtime]") {
  for (std::size_t threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (int64_t count : {0, 1, 2, 7, 100, 1000, 12345}) {
      for (int64_t min_chunk : {0, 1, 3, 64, 1000}) {
        std::vector<std::atomic<int>> seen(static_cast<std::size_t>(count));
        std::mutex ranges_mutex;
        std::vector<std::pair<int64_t, int64_t>> ranges;
        pool.parallel_for(count, min_chunk, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i)
            seen[static_cast<std::size_t>(i)]++;
          std::lock_guard lock(ranges_mutex);
          ranges.emplace_back(begin, end);
        });
        INFO("threads=" << threads << " count=" << count << " min_chunk=" << min_chunk);
        for (const auto& hits : seen)
          REQUIRE(hits.load() == 1);
        CHECK(ranges.size() <= threads);
        if (ranges.size() > 1)
          for (auto [begin, end] : ranges)
            CHECK(end - begin >= std::max<int64_t>(min_chunk, 1));
      }
    }
  }
}

TEST_CASE("parallel_for runs its chunks concurrently on every worker and the caller", "[runtime]") {
  ThreadPool pool(4);
  std::mutex ids_mutex;
  std::vector<std::thread::id> ids;
  std::atomic<int> started{0};
  pool.parallel_for(4, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard lock(ids_mutex);
      ids.push_back(std::this_thread::get_id());
    }
    // Every chunk waits for all four to start: only possible if four threads run them at once.
    started++;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 4 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
  });
  CHECK(started.load() == 4);
  std::sort(ids.begin(), ids.end());
  CHECK(std::unique(ids.begin(), ids.end()) == ids.end());
  CHECK(std::find(ids.begin(), ids.end(), std::this_thread::get_id()) != ids.end());
}

TEST_CASE("parallel_for survives thousands of back-to-back small launches", "[runtime]") {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  for (int launch = 0; launch < 5000; ++launch)
    pool.parallel_for(64, 1, [&](int64_t begin, int64_t end) { total += end - begin; });
  CHECK(total.load() == 5000 * 64);
}

TEST_CASE("an exception thrown in a chunk is rethrown on the caller", "[runtime]") {
  ThreadPool pool(4);
  auto throwing = [](int64_t begin, int64_t end) {
    if (begin <= 50 && 50 < end) throw std::runtime_error("chunk containing 50 failed");
  };
  CHECK_THROWS_WITH(pool.parallel_for(100, 1, throwing), "chunk containing 50 failed");
  // The pool is still usable afterwards.
  std::atomic<int64_t> total{0};
  pool.parallel_for(100, 1, [&](int64_t begin, int64_t end) { total += end - begin; });
  CHECK(total.load() == 100);
}

TEST_CASE("a nested parallel_for runs inline instead of deadlocking", "[runtime]") {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  pool.parallel_for(3, 1, [&](int64_t, int64_t) {
    pool.parallel_for(10, 1, [&](int64_t begin, int64_t end) { total += end - begin; });
  });
  CHECK(total.load() == 30);
}

TEST_CASE("SINTER_NUM_THREADS sets the default thread count", "[runtime]") {
  EnvOverride env("SINTER_NUM_THREADS", "3");
  CHECK(default_thread_count() == 3);
}

TEST_CASE("without SINTER_NUM_THREADS the default is the hardware thread count", "[runtime]") {
  EnvOverride env("SINTER_NUM_THREADS", std::nullopt);
  CHECK(default_thread_count() == std::max(1u, std::thread::hardware_concurrency()));
}

TEST_CASE("a bad SINTER_NUM_THREADS is rejected naming the variable and the value", "[runtime]") {
  for (const char* bad : {"0", "-2", "abc", "4x", " 4", "99999999999999999999"}) {
    EnvOverride env("SINTER_NUM_THREADS", bad);
    INFO("SINTER_NUM_THREADS=" << bad);
    try {
      default_thread_count();
      FAIL("accepted");
    } catch (const std::invalid_argument& error) {
      std::string message = error.what();
      CHECK(message.find("SINTER_NUM_THREADS") != std::string::npos);
      CHECK(message.find(std::string("'") + bad + "'") != std::string::npos);
    }
  }
}

// ---- KeyHasher ----------------------------------------------------------------------------

TEST_CASE("cache keys are stable across runs and sensitive to every input", "[runtime]") {
  KeyHasher h;
  h.add(std::string_view("matmul"));
  h.add(uint64_t{42});
  h.add_double(0.5);
  CacheKey key = h.finish();
  CHECK(key.hex().size() == 32);
  CHECK(key == h.finish());

  auto key_of = [](auto build) {
    KeyHasher k;
    build(k);
    return k.finish();
  };
  CHECK(key_of([](KeyHasher& k) {
          k.add(std::string_view("ab"));
          k.add(std::string_view("c"));
        }) != key_of([](KeyHasher& k) {
          k.add(std::string_view("a"));
          k.add(std::string_view("bc"));
        }));
  CHECK(key_of([](KeyHasher& k) { k.add(uint64_t{1}); }) !=
        key_of([](KeyHasher& k) { k.add(uint64_t{2}); }));
  CHECK(key_of([](KeyHasher& k) { k.add_double(1.0); }) !=
        key_of([](KeyHasher& k) { k.add(std::bit_cast<uint64_t>(1.0)); }));
  CHECK(key_of([](KeyHasher&) {}) != key_of([](KeyHasher& k) { k.add(std::string_view()); }));
}

TEST_CASE("the cache key of fixed inputs never changes", "[runtime]") {
  // Pinned: changing the hash silently invalidates every user's cache, so it must be deliberate.
  KeyHasher h;
  h.add(std::string_view("sinter"));
  h.add(uint64_t{7});
  h.add_double(-1.25);
  CHECK(h.finish().hex() == "a561b7527a396e4e3432a7b00f3e3576");
}

// ---- KernelCache --------------------------------------------------------------------------

TEST_CASE("a stored kernel loads back byte for byte", "[runtime]") {
  TempDir tmp;
  KernelCache cache(tmp.path / "cache");
  CacheKey key = key_named("round trip");
  CHECK_FALSE(cache.load(key).has_value());
  std::vector<char> object = bytes_of("\x7f"
                                      "ELF pretend object with a \0 byte inside");
  cache.store(key, object);
  CHECK(fs::exists(tmp.path / "cache" / (key.hex() + ".sko")));
  std::optional<std::vector<char>> loaded = cache.load(key);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == object);
  KernelCache::Counters c = cache.counters();
  CHECK(c.hits == 1);
  CHECK(c.misses == 1);
  CHECK(c.corrupt == 0);
}

TEST_CASE("an empty object is a valid entry", "[runtime]") {
  TempDir tmp;
  KernelCache cache(tmp.path);
  cache.store(key_named("empty"), {});
  std::optional<std::vector<char>> loaded = cache.load(key_named("empty"));
  REQUIRE(loaded.has_value());
  CHECK(loaded->empty());
}

TEST_CASE("a new cache object on the same directory sees earlier entries", "[runtime]") {
  TempDir tmp;
  CacheKey key = key_named("persisted");
  KernelCache(tmp.path).store(key, bytes_of("object bytes"));
  KernelCache later(tmp.path); // as a new process would
  std::optional<std::vector<char>> loaded = later.load(key);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == bytes_of("object bytes"));
}

TEST_CASE("a truncated entry is reported once, deleted and treated as a miss", "[runtime]") {
  TempDir tmp;
  KernelCache cache(tmp.path);
  CacheKey key = key_named("truncated");
  cache.store(key, std::vector<char>(1000, 'x'));
  fs::path file = cache.entry_path(key);
  for (std::uintmax_t size : {std::uintmax_t{500}, std::uintmax_t{20}, std::uintmax_t{0}}) {
    cache.store(key, std::vector<char>(1000, 'x'));
    fs::resize_file(file, size);
    std::optional<std::vector<char>> loaded;
    std::string err = capture_stderr([&] { loaded = cache.load(key); });
    INFO("truncated to " << size << " bytes; stderr: " << err);
    CHECK_FALSE(loaded.has_value());
    CHECK_FALSE(fs::exists(file));
    CHECK(count_lines(err) == 1);
    CHECK(err.rfind("sinter: kernel cache entry " + file.string() + " is corrupt (", 0) == 0);
    CHECK(err.find("); recompiling\n") != std::string::npos);
  }
  CHECK(cache.counters().corrupt == 3);
}

TEST_CASE("an entry with a flipped payload byte fails its checksum", "[runtime]") {
  TempDir tmp;
  KernelCache cache(tmp.path);
  CacheKey key = key_named("flipped");
  cache.store(key, std::vector<char>(256, 'k'));
  flip_byte(cache.entry_path(key), fs::file_size(cache.entry_path(key)) - 100);
  std::optional<std::vector<char>> loaded;
  std::string err = capture_stderr([&] { loaded = cache.load(key); });
  CHECK_FALSE(loaded.has_value());
  CHECK(err.find("(checksum mismatch)") != std::string::npos);
  CHECK_FALSE(fs::exists(cache.entry_path(key)));
}

TEST_CASE("an entry with a flipped magic byte is rejected", "[runtime]") {
  TempDir tmp;
  KernelCache cache(tmp.path);
  CacheKey key = key_named("magic");
  cache.store(key, bytes_of("payload"));
  flip_byte(cache.entry_path(key), 0);
  std::optional<std::vector<char>> loaded;
  std::string err = capture_stderr([&] { loaded = cache.load(key); });
  CHECK_FALSE(loaded.has_value());
  CHECK(err.find("(bad magic)") != std::string::npos);
}

TEST_CASE("an entry whose header names another key is rejected", "[runtime]") {
  TempDir tmp;
  KernelCache cache(tmp.path);
  CacheKey wanted = key_named("wanted"), other = key_named("other");
  cache.store(other, bytes_of("other kernel"));
  fs::rename(cache.entry_path(other), cache.entry_path(wanted));
  std::optional<std::vector<char>> loaded;
  std::string err = capture_stderr([&] { loaded = cache.load(wanted); });
  CHECK_FALSE(loaded.has_value());
  CHECK(err.find("key mismatch") != std::string::npos);
  CHECK_FALSE(fs::exists(cache.entry_path(wanted)));
}

TEST_CASE("an entry copied under another key with its key field rewritten fails its checksum",
          "[runtime]") {
  TempDir tmp;
  KernelCache cache(tmp.path);
  CacheKey wanted = key_named("wanted"), other = key_named("other");
  cache.store(other, bytes_of("other kernel"));
  fs::rename(cache.entry_path(other), cache.entry_path(wanted));
  {
    std::fstream file(cache.entry_path(wanted), std::ios::in | std::ios::out | std::ios::binary);
    char key_bytes[16];
    for (int i = 0; i < 8; ++i) {
      key_bytes[i] = static_cast<char>((wanted.hi >> (8 * i)) & 0xff);
      key_bytes[8 + i] = static_cast<char>((wanted.lo >> (8 * i)) & 0xff);
    }
    file.seekp(32);
    file.write(key_bytes, 16);
  }
  std::optional<std::vector<char>> loaded;
  std::string err = capture_stderr([&] { loaded = cache.load(wanted); });
  CHECK_FALSE(loaded.has_value());
  CHECK(err.find("(checksum mismatch)") != std::string::npos);
  CHECK_FALSE(fs::exists(cache.entry_path(wanted)));
}

TEST_CASE("two processes storing the same key concurrently always leave a valid entry",
          "[runtime]") {
  TempDir tmp;
  CacheKey key = key_named("contended");
  // Different sizes per process, so a torn or interleaved write could not pass validation.
  std::vector<char> objects[2] = {std::vector<char>(3000, 'a'), std::vector<char>(70000, 'b')};
  std::fflush(nullptr);
  pid_t children[2];
  for (int p = 0; p < 2; ++p) {
    children[p] = ::fork();
    REQUIRE(children[p] >= 0);
    if (children[p] == 0) {
      KernelCache cache(tmp.path);
      int bad = 0;
      for (int i = 0; i < 200; ++i) {
        cache.store(key, objects[p]);
        std::optional<std::vector<char>> loaded = cache.load(key);
        if (loaded && *loaded != objects[0] && *loaded != objects[1]) ++bad;
      }
      bad += static_cast<int>(cache.counters().corrupt);
      bad += cache.enabled() ? 0 : 1;
      ::_exit(bad == 0 ? 0 : 1);
    }
  }
  for (pid_t child : children) {
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  KernelCache cache(tmp.path);
  std::optional<std::vector<char>> loaded = cache.load(key);
  REQUIRE(loaded.has_value());
  CHECK((*loaded == objects[0] || *loaded == objects[1]));
  CHECK(file_names(tmp.path) == std::vector<std::string>{key.hex() + ".sko"});
}

TEST_CASE("stats counts the entries and their bytes on disk", "[runtime]") {
  TempDir tmp;
  KernelCache cache(tmp.path);
  CHECK(cache.stats().entries == 0);
  CHECK(cache.stats().bytes == 0);
  cache.store(key_named("one"), std::vector<char>(100, '1'));
  cache.store(key_named("two"), std::vector<char>(200, '2'));
  cache.store(key_named("two"), std::vector<char>(200, '2')); // overwrites, no new entry
  KernelCache::Stats stats = cache.stats();
  CHECK(stats.entries == 2);
  CHECK(stats.bytes == fs::file_size(cache.entry_path(key_named("one"))) +
                           fs::file_size(cache.entry_path(key_named("two"))));
  CHECK(stats.bytes > 300);
}

TEST_CASE("stats of a directory that does not exist is empty", "[runtime]") {
  TempDir tmp;
  KernelCache cache(tmp.path / "never-created");
  CHECK(cache.stats().entries == 0);
  CHECK(cache.clear() == 0);
  CHECK_FALSE(fs::exists(tmp.path / "never-created"));
}

TEST_CASE("clear removes every entry and leftover temp file", "[runtime]") {
  TempDir tmp;
  KernelCache cache(tmp.path);
  for (int i = 0; i < 5; ++i)
    cache.store(key_named(std::to_string(i)), bytes_of("obj"));
  std::ofstream(tmp.path / (key_named("x").hex() + ".sko.tmp-123-abcdef")) << "half written";
  std::ofstream(tmp.path / "unrelated.txt") << "kept";
  CHECK(cache.clear() == 5);
  CHECK(cache.stats().entries == 0);
  CHECK(file_names(tmp.path) == std::vector<std::string>{"unrelated.txt"});
}

TEST_CASE("record_run_stats writes this process's counters to last-run.txt", "[runtime]") {
  TempDir tmp;
  KernelCache cache(tmp.path);
  CHECK_FALSE(cache.last_run().has_value());
  CacheKey key = key_named("counted");
  CHECK_FALSE(cache.load(key).has_value()); // miss
  cache.note_compiled();
  cache.store(key, bytes_of("obj"));
  CHECK(cache.load(key).has_value()); // hit
  cache.record_run_stats();
  REQUIRE(cache.last_run().has_value());
  CHECK(*cache.last_run() == "hits=1 misses=1 corrupt=0 compiled=1");
  CHECK(KernelCache(tmp.path).last_run() == cache.last_run());
}

TEST_CASE("an unwritable cache directory disables caching with one warning", "[runtime]") {
  TempDir tmp;
  std::ofstream(tmp.path / "a-file") << "not a directory";
  KernelCache cache(tmp.path / "a-file" / "cache"); // cannot be created, even by root
  std::string err = capture_stderr([&] {
    cache.store(key_named("a"), bytes_of("obj"));
    cache.store(key_named("b"), bytes_of("obj"));
    cache.record_run_stats();
  });
  CHECK_FALSE(cache.enabled());
  CHECK(count_lines(err) == 1);
  CHECK(err.find("caching is disabled") != std::string::npos);
  CHECK_FALSE(cache.load(key_named("a")).has_value());
}

TEST_CASE("the default cache dir follows SINTER_CACHE_DIR, XDG_CACHE_HOME, then HOME",
          "[runtime]") {
  EnvOverride home("HOME", "/home/someone");
  {
    EnvOverride xdg("XDG_CACHE_HOME", std::nullopt);
    EnvOverride own("SINTER_CACHE_DIR", std::nullopt);
    CHECK(KernelCache::default_dir() == fs::path("/home/someone/.cache/sinter"));
  }
  {
    EnvOverride xdg("XDG_CACHE_HOME", "/xdg/cache");
    EnvOverride own("SINTER_CACHE_DIR", std::nullopt);
    CHECK(KernelCache::default_dir() == fs::path("/xdg/cache/sinter"));
  }
  {
    EnvOverride xdg("XDG_CACHE_HOME", "/xdg/cache");
    EnvOverride own("SINTER_CACHE_DIR", "/explicit/dir");
    CHECK(KernelCache::default_dir() == fs::path("/explicit/dir"));
  }
}

// ---- Context ------------------------------------------------------------------------------

TEST_CASE("a context owns a pool of the requested size and a cache at the given dir", "[runtime]") {
  TempDir tmp;
  Context context(2, tmp.path);
  CHECK(context.pool().size() == 2);
  CHECK(context.cache().dir() == tmp.path);
  std::atomic<int64_t> total{0};
  context.pool().parallel_for(10, 1, [&](int64_t begin, int64_t end) { total += end - begin; });
  CHECK(total.load() == 10);
}

namespace {

/// A deferred value that counts its fetches (the role a GPU buffer plays for real).
struct CountingSource final : sinter::DeferredBytes {
  mutable int fetches = 0;
  void fetch(std::span<std::byte> into) const override {
    ++fetches;
    auto* values = reinterpret_cast<float*>(into.data());
    for (std::size_t i = 0; i < into.size() / sizeof(float); ++i)
      values[i] = static_cast<float>(i) + 0.5f;
  }
};

} // namespace

TEST_CASE("HostTensor: a deferred value is fetched once, on first access", "[runtime]") {
  using sinter::HostTensor;
  auto source = std::make_shared<CountingSource>();
  HostTensor t(sinter::DType::f32, {4});
  t.defer(source);
  CHECK(t.deferred());
  CHECK(t.byte_size() == 16);
  CHECK(source->fetches == 0);
  HostTensor moved = std::move(t); // moves never fetch
  CHECK(moved.deferred());
  CHECK(source->fetches == 0);
  CHECK(moved.at(2) == 2.5);
  CHECK(source->fetches == 1);
  CHECK(moved.to_doubles() == std::vector<double>{0.5, 1.5, 2.5, 3.5});
  CHECK(source->fetches == 1);
  // Read, not written: it still holds the source's value.
  CHECK(moved.unwritten_source() == source.get());
  moved.set(0, 9.0);
  CHECK(moved.unwritten_source() == nullptr);
  CHECK(moved.at(0) == 9.0);
}

TEST_CASE("HostTensor: copies of a deferred tensor hold real bytes", "[runtime]") {
  using sinter::HostTensor;
  auto source = std::make_shared<CountingSource>();
  HostTensor t(sinter::DType::f32, {3});
  t.defer(source);
  HostTensor copy = t;
  CHECK(source->fetches == 1);
  CHECK_FALSE(copy.deferred());
  CHECK(copy.unwritten_source() == nullptr); // a copy is the host's own value
  CHECK(copy.to_doubles() == std::vector<double>{0.5, 1.5, 2.5});
  CHECK(t.unwritten_source() == source.get());
  HostTensor assigned;
  assigned = t;
  CHECK(assigned.to_doubles() == copy.to_doubles());
  CHECK(source->fetches == 1); // t was fetched once, by the first copy
}

TEST_CASE("HostTensor: known_zero holds from making until the first write", "[runtime]") {
  using sinter::HostTensor;
  HostTensor fresh(sinter::DType::f32, {8});
  CHECK(fresh.known_zero());
  CHECK(fresh.at(3) == 0.0); // reading keeps it
  CHECK(fresh.known_zero());
  HostTensor copy = fresh, borrowed = HostTensor::borrow(fresh);
  CHECK(copy.known_zero());
  CHECK(borrowed.known_zero());
  HostTensor written = fresh;
  written.set(2, 1.0);
  CHECK_FALSE(written.known_zero());
  CHECK_FALSE(HostTensor(written).known_zero());
  HostTensor through_bytes = fresh;
  (void)through_bytes.bytes(); // writable bytes: whatever the caller does with them
  CHECK_FALSE(through_bytes.known_zero());
  HostTensor deferred = fresh;
  deferred.defer(std::make_shared<CountingSource>());
  CHECK_FALSE(deferred.known_zero());
  CHECK_FALSE(HostTensor::from_doubles(sinter::DType::f32, {2}, std::vector<double>{0, 0})
                  .known_zero()); // made from values, even zeros: not known without looking
  CHECK_FALSE(HostTensor().known_zero());
}

TEST_CASE("a compiled graph still runs after it is moved, on the CPU and the interpreter",
          "[runtime]") {
  TempDir dir("sinter-moved-graph");
  sinter::Context context(2, dir.path);
  for (sinter::Backend backend : {sinter::Backend::cpu, sinter::Backend::interpreter}) {
    INFO("backend " << sinter::Device(backend).name());
    sinter::Graph g;
    sinter::Value x = sinter::input(g, "x", {sinter::DType::f32, {3}});
    g.add_output("y", (x * 2.0 + 1.0).id);
    sinter::CompiledGraph original(std::move(g), std::nullopt, backend, &context);
    sinter::CompiledGraph moved = std::move(original); // executables must not point into it
    std::vector<double> values{1, 2, 3};
    std::vector<sinter::HostTensor> in;
    in.push_back(sinter::HostTensor::from_doubles(sinter::DType::f32, {3}, values));
    auto out = moved.run(in);
    REQUIRE(out.size() == 1);
    CHECK(out[0].to_doubles() == std::vector<double>{3, 5, 7});
  }
}
