// tests/fuzz/fuzz_kernel_cache.cpp — libFuzzer target: a kernel-cache entry file through
// KernelCache::load, which must hand back only an entry that validates and delete any other
#include "fuzz_support.hpp"
#include "jit/runtime/kernel_cache.hpp"

#include <iterator>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace sinter;
  static KernelCache cache(fuzz::scratch() / "cache");
  // The seeds were stored under this key (make_seeds.cpp): a payload copied under another
  // key is a corrupt entry too.
  const CacheKey key{0x5151'7e57'0000'0001ull, 0x0123'4567'89ab'cdefull};
  std::filesystem::create_directories(cache.dir());
  const std::filesystem::path entry = cache.entry_path(key);
  fuzz::as_file(std::filesystem::relative(entry, fuzz::scratch()).string(),
                {reinterpret_cast<const char*>(data), size});
  const uint64_t corrupt_before = cache.counters().corrupt;
  std::optional<std::vector<char>> object = cache.load(key);
  if (object) {
    // Only an entry exactly as store() writes it for this key is valid: storing the payload
    // again must write the input's bytes (another key, size or checksum in the header differs).
    cache.store(key, *object);
    std::ifstream stored(entry, std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(stored),
                            std::istreambuf_iterator<char>()};
    if (bytes != std::string_view(reinterpret_cast<const char*>(data), size)) std::abort();
  } else if (cache.counters().corrupt != corrupt_before + 1 || std::filesystem::exists(entry)) {
    // A present entry that does not validate is counted as corrupt and deleted.
    std::abort();
  }
  return 0;
}
