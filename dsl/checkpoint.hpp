// dsl/checkpoint.hpp — save and resume a model with its optimizer state as safetensors
#pragma once
#include "dsl/train.hpp"
#include "jit/io/checkpoint.hpp"
#include "jit/io/pretrained_weights.hpp"
#include "jit/io/sharded_checkpoint.hpp"
#include "jit/train/step_roles.hpp"

#include <filesystem>
#include <map>
#include <string>

namespace sinter {

/// Writes `model.<param>` and `optimizer.<state>.<param>` tensors plus `step` and `extra` as
/// string metadata, atomically (an interrupted save leaves the previous checkpoint intact). The
/// file is standard safetensors: PyTorch's `safetensors.torch.load_file` reads it.
/// In a data-parallel job every rank calls it. Plain data parallel: rank 0 writes the file (the
/// others hold the same values). Under ZeRO each rank writes its pieces of the optimizer state
/// to `<stem>.step<S>.rank<r>-of-<N>.safetensors` and rank 0 writes `file` as their index
/// (docs/distributed.md, "Checkpoints"); `sinter checkpoint export` makes it one file.
/// `extra_tensors` are saved whole beside them (a sifter's state: docs/sifting.md).
template <class Model, class LossFn>
void save_checkpoint(const std::filesystem::path& file, Model& model,
                     CompiledStep<Model, LossFn>& step,
                     std::map<std::string, std::string> extra = {},
                     const NamedTensors& extra_tensors = {}) {
  TrainStep& runtime = step.runtime();
  NamedTensors whole = extra_tensors;
  for_each_parameter(model, [&](const std::string& name, Parameter& p) {
    whole.emplace_back("model." + name, &p.value);
  });
  std::vector<ShardedTensor> pieces;
  for (auto& [name, tensor] : runtime.state()) {
    std::string key = step_names::checkpoint_key(name);
    if (runtime.state_pieces(name) > 1)
      pieces.push_back({key, tensor, runtime.state_shape(name)});
    else
      whole.emplace_back(key, tensor);
  }
  extra["step"] = std::to_string(step.steps());
  extra["format"] = "sinter-checkpoint-v1";
  if (runtime.state_pieces() > 1) {
    save_sharded_checkpoint(file, whole, pieces, extra, runtime.communicator(), step.steps());
    return;
  }
  if (runtime.communicator().rank() == 0) save_safetensors(file, whole, extra);
}

/// Restores what save_checkpoint wrote into `model` and `step` and returns the metadata, at any
/// world size and ZeRO stage: each rank takes the whole parameters and its piece of the
/// optimizer state, whatever the number of ranks that wrote it. Throws std::runtime_error
/// naming the first missing or mismatched tensor, a tensor holding inf or NaN (or a negative
/// AdamW second moment), a `step` that is no integer from 0, or a missing shard file; nothing
/// changes then (fp16 loss-scaling state, `optimizer.amp.*`, and in-step sifting's,
/// `optimizer.sift.*`, may be missing: they then start afresh).
template <class Model, class LossFn>
std::map<std::string, std::string> load_checkpoint(const std::filesystem::path& file, Model& model,
                                                   CompiledStep<Model, LossFn>& step) {
  CheckpointReader reader(file);
  // Everything is read and checked first: a checkpoint refused for its metadata, a tensor or
  // a value changes nothing.
  int64_t steps = metadata_integer(reader.metadata(), "step", file, 0, int64_t{1} << 62);
  std::vector<std::pair<HostTensor*, HostTensor>> restored;
  for_each_parameter(model, [&](const std::string& name, Parameter& p) {
    HostTensor t = reader.read("model." + name, p.value.dtype(), p.value.shape());
    require_finite(t, "model." + name, file);
    restored.emplace_back(&p.value, std::move(t));
  });
  TrainStep& runtime = step.runtime();
  for (auto& [name, tensor] : runtime.state()) {
    std::string key = step_names::checkpoint_key(name);
    // fp16 loss-scaling state is optional: a run resumed under fp16 from a bf16 or f32
    // checkpoint starts from the initial scale. So is in-step sifting's: a run that starts
    // sifting from a checkpoint written without it starts with an empty loss history.
    if (step_names::is_step_wide_state(name) && !reader.contains(key)) continue;
    HostTensor t = step_names::is_step_wide_state(name)
                       ? reader.read(key, tensor->dtype(), tensor->shape())
                       : reader.read(key, tensor->dtype(), runtime.state_shape(name),
                                     runtime.state_pieces(name), runtime.communicator().rank());
    // AdamW's second moment is a mean of squares: never below 0. Sifting's counters count.
    require_finite(t, key, file, name.starts_with("state.v."));
    if (name == step_names::sift_counters) require_counts(t, key, file);
    restored.emplace_back(tensor, std::move(t));
  }
  for (auto& [into, value] : restored)
    *into = std::move(value);
  runtime.set_steps(steps);
  return reader.metadata();
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
/// load_safetensors, and a tensor holding inf or NaN is refused by name. Nothing in `model`
/// changes unless every tensor matches.
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
    require_finite(it->second, it->first, file);
    matched.emplace_back(&p, &it->second);
  });
  for (auto [parameter, tensor] : matched)
    parameter->value = std::move(*tensor);
  return ckpt.metadata;
}

/// How load_weights(file, model, options) reads a file.
struct LoadWeightsOptions {
  /// The file's naming: sinter's own (default), or another library's: hf::gpt2, hf::vit,
  /// hf::bert, hf::roberta (docs/pretrained.md).
  WeightNames names = {};
  /// Load only the parameters under this path of the model (`vit` of a model holding a ViT
  /// as member `vit`), named without it; the others keep their values. Empty: all of them.
  std::string under;
  /// Refuse a file holding tensors that no parameter reads (another configuration); false
  /// loads what the model has and leaves the rest of the file.
  bool strict = true;
};

/// Loads `model`'s parameters (or those `under` a path) from a safetensors file by a naming
/// scheme: `load_weights("gpt2/model.safetensors", model, {.names = hf::gpt2})`. Tensors are
/// laid out (transposed, packed) and converted to each parameter's dtype. Throws
/// std::runtime_error naming the file, the parameter and the tensor for a missing tensor, a
/// shape that differs, a tensor holding inf or NaN, or (strict) a tensor nothing reads;
/// nothing in `model` changes then.
template <class Model>
void load_weights(const std::filesystem::path& file, Model& model,
                  const LoadWeightsOptions& options) {
  std::vector<WantedTensor> wanted;
  std::vector<Parameter*> into;
  const std::string prefix = options.under.empty() ? "" : options.under + ".";
  for_each_parameter(model, [&](const std::string& name, Parameter& p) {
    if (!name.starts_with(prefix)) return;
    wanted.push_back({name.substr(prefix.size()), p.value.dtype(), p.value.shape()});
    into.push_back(&p);
  });
  if (wanted.empty())
    throw std::invalid_argument("sinter: the model has no parameters under '" + options.under +
                                "' — name a member path of the model (e.g. \"vit\")");
  std::vector<HostTensor> values = read_named_weights(file, wanted, options.names, options.strict);
  for (std::size_t i = 0; i < into.size(); ++i)
    into[i]->value = std::move(values[i]);
}

} // namespace sinter
