// tests/fuzz/fuzz_text.cpp — libFuzzer target: a text file through the byte-window data set,
// its holdout split and a loader over the training part
#include "fuzz_support.hpp"
#include "jit/data/loader.hpp"
#include "jit/data/text.hpp"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace sinter;
  if (size < 2) return 0;
  // The first two bytes choose the context (1 to 64) and the held-out share (0 to 0.5).
  const int64_t context = 1 + data[0] % 64;
  const double holdout = (data[1] % 51) / 100.0;
  const std::filesystem::path file =
      fuzz::as_file("corpus.txt", {reinterpret_cast<const char*>(data + 2), size - 2});
  try {
    auto [train, held] = data::split_holdout(data::text_windows(file, context), holdout);
    for (const data::Dataset* set : {train.get(), held.get()}) {
      if (set->size() == 0) continue;
      data::DataLoader loader(
          *set,
          {.batch_size = 3, .shuffle = true, .seed = 1, .drop_last = false, .prefetch_threads = 0});
      data::Batch batch;
      while (loader.next(batch)) {
        if (batch.examples.shape() != Shape{3, context}) std::abort();
        for (double token : batch.examples.to_doubles())
          if (token < 0 || token > 255) std::abort();
      }
    }
  } catch (const std::invalid_argument& e) {
    fuzz::require_named(e.what(), {file.string(), "holdout"});
  } catch (const std::runtime_error& e) {
    fuzz::require_named(e.what(), {file.string()});
  }
  return 0;
}
