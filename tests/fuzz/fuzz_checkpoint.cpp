// tests/fuzz/fuzz_checkpoint.cpp — libFuzzer target: a checkpoint (an index and up to two shard
// files) restored into a compiled training step and a sifting loader, as `--resume` does
#include "fuzz_support.hpp"
#include "restore_model.hpp"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace sinter;
  static fuzz::RestoreModel restored;
  // The index, then the shard files the seeds' indexes list (make_seeds.cpp).
  std::vector<std::string_view> files = fuzz::parts(data, size, 3);
  const std::filesystem::path index = fuzz::as_file("ck.safetensors", files[0]);
  std::vector<std::string> named{index.string(), "model.", "optimizer.", "sift."};
  for (std::size_t i = 1; i < 3; ++i) {
    const std::string shard = "ck.step1.rank" + std::to_string(i - 1) + "-of-2.safetensors";
    named.push_back(shard);
    if (i < files.size())
      fuzz::as_file(shard, files[i]);
    else
      std::filesystem::remove(fuzz::scratch() / shard);
  }
  try {
    load_checkpoint(index, restored.model, restored.step);
  } catch (const std::runtime_error& e) {
    fuzz::require_named(e.what(), named);
  }
  data::DataLoader inner(*restored.blobs, fuzz::RestoreModel::loader_options);
  auto sifting = restored.sifting(inner);
  try {
    sifting->restore(CheckpointReader(index).with_prefix("sift."));
  } catch (const std::runtime_error& e) {
    fuzz::require_named(e.what(), named);
    return 0;
  }
  // Restored pending samples are used by the next batches: two of them reach past the pending
  // rows into fresh ones. What fails here comes from accepted values (restored weights that
  // are finite but make the loss inf): a runtime error saying so, never a crash.
  try {
    data::Batch batch;
    for (int i = 0; i < 2 && sifting->next(batch); ++i)
      if (batch.examples.shape() != Shape{8, 6}) std::abort();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
