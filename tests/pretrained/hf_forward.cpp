// tests/pretrained/hf_forward.cpp — runs a Hugging Face model folder's forward pass in sinter
// for check_hf_weights.py
//
// Usage: hf_forward [--part] [--export FOLDER] DIR INPUTS OUTPUTS
//   DIR      what save_pretrained wrote (config.json, model.safetensors); its model_type picks
//            the model: gpt2, vit, bert or roberta
//   INPUTS   safetensors: input_ids (i64 [B, T]) with, for bert/roberta, attention_mask and
//            token_type_ids; or pixel_values (f32 [B, C, H, W]) for vit
//   OUTPUTS  written: logits (gpt2, a ViT classifier), pooler_output (ViTModel, bert, roberta)
//            and last_hidden_state (bert, roberta)
//   --part   load with .strict = false (a task model's encoder without its head)
//   --export FOLDER  then write the model with hf::save_pretrained into FOLDER
// With SINTER_HF_TIMING=1 it prints `hf_forward: build X s, load Y s, forward Z s` on stderr.
// A refused file prints "hf_forward: <the error>" and exits 1.
#include "dsl/sinter.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace sinter;

namespace {

/// Seconds since the last call (the phases SINTER_HF_TIMING reports).
double lap() {
  static auto last = std::chrono::steady_clock::now();
  auto now = std::chrono::steady_clock::now();
  double seconds = std::chrono::duration<double>(now - last).count();
  last = now;
  return seconds;
}

struct Phases {
  double build = 0, load = 0, forward = 0;
};

HostTensor as_f32(const HostTensor& t) {
  HostTensor out(DType::f32, t.shape());
  for (int64_t i = 0; i < t.size(); ++i)
    out.set(i, t.at(i));
  return out;
}

int run(bool part, const std::string& export_to, const std::filesystem::path& dir,
        const std::filesystem::path& inputs_file, const std::filesystem::path& outputs_file) {
  Checkpoint inputs = load_safetensors(inputs_file);
  auto input = [&](const std::string& name) -> HostTensor& {
    auto it = inputs.tensors.find(name);
    if (it == inputs.tensors.end())
      throw std::runtime_error(inputs_file.string() + " has no '" + name + "'");
    return it->second;
  };
  const WeightNames& names = hf::names_for(dir);
  LoadWeightsOptions options{.names = names, .strict = !part};
  std::vector<std::pair<std::string, HostTensor>> outputs;
  Phases phases;
  lap();
  Init init = Init::for_loading(); // every parameter is loaded
  if (names.family == "hf::gpt2") {
    GPTConfig config = hf::gpt2_config(dir);
    GPT model(config, init);
    phases.build = lap();
    load_weights(hf::weights_file(dir), model, options);
    phases.load = lap();
    auto logits = compile_eval(model, [](GPT& m, Var ids) { return m(ids); }, {"input_ids"});
    outputs.emplace_back("logits", logits(input("input_ids")));
    if (!export_to.empty()) hf::save_pretrained(export_to, model, config);
  } else if (names.family == "hf::vit") {
    ViTConfig config = hf::vit_config(dir);
    ViT model(config, init);
    phases.build = lap();
    load_weights(hf::weights_file(dir), model, options);
    phases.load = lap();
    HostTensor pixels = input("pixel_values");
    if (config.channels == 1) { // sinter's one-channel ViT reads [B, H, W]
      HostTensor planar(DType::f32, {pixels.shape()[0], pixels.shape()[2], pixels.shape()[3]});
      std::memcpy(planar.bytes().data(), pixels.bytes().data(), pixels.byte_size());
      pixels = std::move(planar);
    }
    auto forward = compile_eval(model, [](ViT& m, Var images) { return m(images); }, {"pixels"});
    outputs.emplace_back(config.classes > 0 ? "logits" : "pooler_output", forward(pixels));
    if (!export_to.empty()) hf::save_pretrained(export_to, model, config);
  } else {
    BertConfig config = hf::bert_config(dir);
    Bert model(config, init);
    phases.build = lap();
    load_weights(hf::weights_file(dir), model, options);
    phases.load = lap();
    HostTensor mask = as_f32(input("attention_mask"));
    auto hidden = compile_eval(
        model, [](Bert& m, Var ids, Var types, Var keep) { return m(ids, types, keep); },
        {"input_ids", "token_type_ids", "attention_mask"});
    auto pooled = compile_eval(
        model, [](Bert& m, Var ids, Var types, Var keep) { return m.pool(m(ids, types, keep)); },
        {"input_ids", "token_type_ids", "attention_mask"});
    outputs.emplace_back("last_hidden_state",
                         hidden(input("input_ids"), input("token_type_ids"), mask));
    outputs.emplace_back("pooler_output",
                         pooled(input("input_ids"), input("token_type_ids"), mask));
    if (!export_to.empty()) hf::save_pretrained(export_to, model, config);
  }
  phases.forward = lap();
  if (const char* timing = std::getenv("SINTER_HF_TIMING"); timing && std::string(timing) == "1")
    std::fprintf(stderr, "hf_forward: build %.2f s, load %.2f s, forward %.2f s\n", phases.build,
                 phases.load, phases.forward);
  std::vector<std::pair<std::string, const HostTensor*>> written;
  for (auto& [name, tensor] : outputs)
    written.emplace_back(name, &tensor);
  save_safetensors(outputs_file, written);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  bool part = false;
  std::string export_to;
  int at = 1;
  for (; at < argc && std::strncmp(argv[at], "--", 2) == 0; ++at) {
    if (std::strcmp(argv[at], "--part") == 0)
      part = true;
    else if (std::strcmp(argv[at], "--export") == 0 && at + 1 < argc)
      export_to = argv[++at];
    else
      break;
  }
  if (argc - at != 3) {
    std::fprintf(stderr, "usage: hf_forward [--part] [--export FOLDER] DIR INPUTS OUTPUTS\n");
    return 2;
  }
  try {
    return run(part, export_to, argv[at], argv[at + 1], argv[at + 2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_forward: %s\n", e.what());
    return 1;
  }
}
