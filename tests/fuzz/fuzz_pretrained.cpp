// tests/fuzz/fuzz_pretrained.cpp — libFuzzer target: a Hugging Face folder (config.json and
// model.safetensors) through the configuration readers and load_weights by the family's names
#include "dsl/sinter.hpp"
#include "fuzz_support.hpp"

#include <stdexcept>

namespace {

using namespace sinter;

/// Small enough to build in the fuzzer's memory limit: every size at most 256, depth at most 4.
bool small(std::initializer_list<int64_t> sizes, int64_t depth) {
  for (int64_t s : sizes)
    if (s > 256) return false;
  return depth <= 4;
}

void load(const std::filesystem::path& folder, const std::filesystem::path& weights) {
  const WeightNames& names = hf::names_for(folder);
  Init init(1);
  LoadWeightsOptions options{.names = names};
  if (&names == &hf::gpt2) {
    GPTConfig c = hf::gpt2_config(folder);
    if (!small({c.vocab, c.context, c.dim, c.mlp_hidden}, c.depth)) return;
    GPT model(c, init);
    load_weights(weights, model, options);
  } else if (&names == &hf::vit) {
    ViTConfig c = hf::vit_config(folder);
    if (!small({c.image, c.dim, c.mlp_hidden, c.classes, c.channels}, c.depth)) return;
    ViT model(c, init);
    load_weights(weights, model, options);
  } else {
    BertConfig c = hf::bert_config(folder);
    if (!small({c.vocab, c.context + c.position_offset, c.type_vocab, c.dim, c.mlp_hidden},
               c.depth))
      return;
    Bert model(c, init);
    load_weights(weights, model, options);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::vector<std::string_view> files = fuzz::parts(data, size, 2);
  const std::filesystem::path folder = fuzz::scratch() / "hf";
  std::filesystem::create_directories(folder);
  const std::filesystem::path config = fuzz::as_file("hf/config.json", files[0]);
  const std::filesystem::path weights =
      fuzz::as_file("hf/model.safetensors", files.size() > 1 ? files[1] : std::string_view());
  try {
    load(folder, weights);
  } catch (const std::runtime_error& e) {
    fuzz::require_named(e.what(), {config.string(), weights.string()});
  }
  return 0;
}
