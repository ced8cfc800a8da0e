// dsl/checkpoint.hpp — save and resume a model with its optimizer state as safetensors
#pragma once
#include "dsl/train.hpp"
#include "jit/io/checkpoint.hpp"

#include <filesystem>
#include <map>
#include <string>

namespace sinter {

/// Writes `model.<param>` and `optimizer.<state>.<param>` tensors plus `step` and `extra` as
/// string metadata, atomically (an interrupted save leaves the previous file intact). The file
/// is standard safetensors: PyTorch's `safetensors.torch.load_file` reads it.
template <class Model, class LossFn>
void save_checkpoint(const std::filesystem::path& file, Model& model,
                     CompiledStep<Model, LossFn>& step,
                     std::map<std::string, std::string> extra = {}) {
  std::vector<std::pair<std::string, const HostTensor*>> tensors;
  for_each_parameter(model, [&](const std::string& name, Parameter& p) {
    tensors.emplace_back("model." + name, &p.value);
  });
  for (auto& [name, tensor] : step.runtime().state())
    tensors.emplace_back("optimizer." + name.substr(6), tensor); // drop "state."
  extra["step"] = std::to_string(step.steps());
  extra["format"] = "sinter-checkpoint-v1";
  save_safetensors(file, tensors, extra);
}

/// Restores what save_checkpoint wrote into `model` and `step` and returns the metadata.
/// Throws std::runtime_error naming the first missing or mismatched tensor (fp16 loss-scaling
/// state, `optimizer.amp.*`, may be missing: the scale then starts afresh).
template <class Model, class LossFn>
std::map<std::string, std::string> load_checkpoint(const std::filesystem::path& file, Model& model,
                                                   CompiledStep<Model, LossFn>& step) {
  Checkpoint ckpt = load_safetensors(file);
  auto take = [&](const std::string& key, HostTensor& into, bool optional = false) {
    auto it = ckpt.tensors.find(key);
    if (it == ckpt.tensors.end() && optional) return;
    if (it == ckpt.tensors.end())
      throw std::runtime_error("sinter: checkpoint " + file.string() + " has no tensor '" + key +
                               "' — it was written for a different model or optimizer");
    if (it->second.dtype() != into.dtype() || it->second.shape() != into.shape())
      throw std::runtime_error("sinter: checkpoint " + file.string() + ": '" + key + "' is " +
                               to_string(TensorType{it->second.dtype(), it->second.shape()}) +
                               ", the model expects " +
                               to_string(TensorType{into.dtype(), into.shape()}));
    into = std::move(it->second);
  };
  for_each_parameter(
      model, [&](const std::string& name, Parameter& p) { take("model." + name, p.value); });
  // fp16 loss-scaling state is optional: a run resumed under fp16 from a bf16 or f32
  // checkpoint starts from the initial scale.
  for (auto& [name, tensor] : step.runtime().state())
    take("optimizer." + name.substr(6), *tensor, name.starts_with("state.amp."));
  auto it = ckpt.metadata.find("step");
  if (it == ckpt.metadata.end())
    throw std::runtime_error("sinter: checkpoint " + file.string() + " has no 'step' metadata");
  step.runtime().set_steps(std::stoll(it->second));
  return ckpt.metadata;
}

/// Writes `model.<param>` for every parameter of `model` (no optimizer state), atomically:
/// what load_weights reads, e.g. a teacher for distillation.
template <class Model>
void save_weights(const std::filesystem::path& file, Model& model,
                  std::map<std::string, std::string> extra = {}) {
  std::vector<std::pair<std::string, const HostTensor*>> tensors;
  for_each_parameter(model, [&](const std::string& name, Parameter& p) {
    tensors.emplace_back("model." + name, &p.value);
  });
  extra["format"] = "sinter-weights-v1";
  save_safetensors(file, tensors, extra);
}

/// Loads every parameter of `model` from a safetensors file: `model.<param>` as save_checkpoint
/// and save_weights write them, or plain `<param>` names. Other tensors (optimizer state) are
/// ignored. Throws std::runtime_error naming the file and the first missing tensor, or the
/// tensor whose dtype or shape differs with both types; a corrupt file is refused by
/// load_safetensors. Nothing in `model` changes unless every tensor matches.
template <class Model>
std::map<std::string, std::string> load_weights(const std::filesystem::path& file, Model& model) {
  Checkpoint ckpt = load_safetensors(file);
  std::vector<std::pair<Parameter*, HostTensor*>> matched;
  for_each_parameter(model, [&](const std::string& name, Parameter& p) {
    auto it = ckpt.tensors.find("model." + name);
    if (it == ckpt.tensors.end()) it = ckpt.tensors.find(name);
    if (it == ckpt.tensors.end())
      throw std::runtime_error("sinter: " + file.string() + " has no tensor 'model." + name +
                               "' (nor '" + name +
                               "') — it holds weights of a different model or configuration");
    if (it->second.dtype() != p.value.dtype() || it->second.shape() != p.value.shape())
      throw std::runtime_error("sinter: " + file.string() + ": tensor '" + it->first + "' is " +
                               to_string(TensorType{it->second.dtype(), it->second.shape()}) +
                               " but the model's '" + name + "' is " +
                               to_string(TensorType{p.value.dtype(), p.value.shape()}) +
                               " — build the model with the configuration that wrote the file");
    matched.emplace_back(&p, &it->second);
  });
  for (auto [parameter, tensor] : matched)
    parameter->value = std::move(*tensor);
  return ckpt.metadata;
}

} // namespace sinter
