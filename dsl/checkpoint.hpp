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

} // namespace sinter
