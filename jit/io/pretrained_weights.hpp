// jit/io/pretrained_weights.hpp — weight files by other libraries' names (Hugging Face's GPT-2,
// ViT, BERT, RoBERTa) read into sinter's parameter layout, and their config.json files
#pragma once
#include "jit/ir/dtype.hpp"
#include "jit/ir/shape.hpp"
#include "jit/runtime/host_tensor.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace sinter {

namespace json {
struct Value;
}

/// How one sinter parameter is made from a file's tensors.
enum class TensorLayout : uint8_t {
  same,       ///< the tensor as it is
  flattened,  ///< the same elements without leading dims of size 1 ([1, 1, D] → [D])
  transposed, ///< a PyTorch nn.Linear weight [out, in] → sinter's [in, out]
  /// several nn.Linear weights [out_i, in] → one [in, Σ out_i] (query, key, value → qkv);
  /// vectors (their biases) are concatenated
  packed_transposed,
  conv_patches, ///< a Conv2d weight [out, C, P, P] → PatchEmbed's [C·P·P, out]
  zeros,        ///< no tensor: zeros (a bias the other model does not have)
};

/// The file tensors one sinter parameter is made of (names without the file's prefix).
struct TensorSource {
  std::vector<std::string> names;
  TensorLayout layout = TensorLayout::same;
  int64_t file_rank = 0; ///< flattened: the rank the file holds it at (leading 1s); written so
};

/// A naming scheme: which tensors of a file make each sinter parameter. The default scheme is
/// sinter's own (`model.<name>` as save_weights writes, or `<name>`).
struct WeightNames {
  std::string family = "sinter"; ///< named in errors: "hf::gpt2"
  /// Prefixes the file's names may carry, tried in order ("" first: `h.0…` or
  /// `transformer.h.0…`).
  std::vector<std::string> prefixes = {"model.", ""};
  /// The source of a sinter parameter (its dotted name); nullopt: the scheme has none for it.
  std::function<std::optional<TensorSource>(const std::string&)> source;
  /// Tensors a file may hold that no parameter reads (buffers such as GPT-2's causal mask).
  std::function<bool(const std::string&)> ignorable;
  /// (copy, original): the file may hold `copy` beside `original` when the model ties them
  /// (GPT-2's lm_head and token table); it is then checked to be equal, not read.
  std::vector<std::pair<std::string, std::string>> tied;
  /// Writing: the task model's prefix (`transformer.`, `vit.`) that names carry when the model
  /// has a head, and the head's own names, which never carry it (`lm_head.`, `classifier.`).
  std::string task_prefix;
  std::string head_prefix;
};

namespace hf {
/// transformers' GPT2LMHeadModel / GPT2Model into sinter::GPT (GPTConfig from gpt2_config).
extern const WeightNames gpt2;
/// ViTModel / ViTForImageClassification into sinter::ViT.
extern const WeightNames vit;
/// BertModel (or a Bert…For… model's `bert.` part) into sinter::Bert.
extern const WeightNames bert;
/// RobertaModel (or `roberta.`) into sinter::Bert with position_offset = 2.
extern const WeightNames roberta;
} // namespace hf

/// One parameter to read: its dotted name and what it must be.
struct WantedTensor {
  std::string name;
  DType dtype;
  Shape shape;
};

/// Reads `wanted` from the safetensors `file` by `names`: each parameter's source tensors are
/// found under the scheme's prefixes, laid out (transposed, packed, …) and converted to the
/// parameter's dtype. Returns the tensors in `wanted`'s order. Throws std::runtime_error naming
/// the file, the parameter and the tensor when one is missing, has the wrong shape after its
/// layout, is not floating point or holds inf or NaN; and, when `strict`, when the file holds
/// a tensor no parameter reads (another configuration: more layers, a head), naming it.
std::vector<HostTensor> read_named_weights(const std::filesystem::path& file,
                                           std::span<const WantedTensor> wanted,
                                           const WeightNames& names, bool strict);

/// One parameter to write: its dotted name and value.
struct NamedWeight {
  std::string name;
  const HostTensor* value;
};

/// The inverse of read_named_weights: writes `weights` to the safetensors `file` (atomically)
/// under the scheme's names, laid out as the other library holds them (transposed back, q/k/v
/// split, the patch Linear as a Conv2d of `image_channels` channels). A parameter the scheme
/// reads as zeros must be all zeros (the other model has no place for it). Throws
/// std::runtime_error naming the parameter when it cannot be written.
void write_named_weights(const std::filesystem::path& file, std::span<const NamedWeight> weights,
                         const WeightNames& names, int64_t image_channels = 1);

/// The shortest text that reads back as `value` (config.json numbers: 1e-12, 0.02).
std::string json_number(double value);

/// A config.json being written: members in the order added.
class ConfigText {
public:
  ConfigText& add(const std::string& key, int64_t value);
  ConfigText& add(const std::string& key, double value);
  ConfigText& add(const std::string& key, bool value);
  ConfigText& add(const std::string& key, const std::string& value);
  ConfigText& add(const std::string& key, const char* value) {
    return add(key, std::string(value));
  }
  /// A member whose value is already JSON text (an array, an object, null).
  ConfigText& raw(const std::string& key, const std::string& json_value);
  std::string str() const;

private:
  std::string text_;
};

/// Writes `config` as `folder`/config.json (atomically), making the folder.
void write_model_config(const std::filesystem::path& folder, const ConfigText& config);

/// A model's configuration file (Hugging Face's config.json), with typed look-ups whose errors
/// name the file, the key and the fix.
class ModelConfigFile {
public:
  /// `path`: a .json file itself, a folder (its config.json), or a weights file beside it.
  explicit ModelConfigFile(const std::filesystem::path& path);
  ~ModelConfigFile();
  ModelConfigFile(ModelConfigFile&&) noexcept;
  ModelConfigFile& operator=(ModelConfigFile&&) noexcept;

  /// The .json file `path` names: itself, the config.json inside a folder, or the one beside
  /// a weights file.
  static std::filesystem::path locate(const std::filesystem::path& path);

  const std::filesystem::path& file() const { return file_; }
  bool has(const std::string& key) const;
  /// A whole number (fallback when absent; absent without fallback: an error).
  int64_t integer(const std::string& key, std::optional<int64_t> fallback = {}) const;
  double real(const std::string& key, std::optional<double> fallback = {}) const;
  std::string text(const std::string& key, std::optional<std::string> fallback = {}) const;
  bool flag(const std::string& key, std::optional<bool> fallback = {}) const;
  /// An array of numbers (empty when absent).
  std::vector<double> reals(const std::string& key) const;
  /// The number of members of an object or elements of an array (0 when absent).
  int64_t count(const std::string& key) const;
  /// Whether the array `key` holds the string `value` ("architectures": […]).
  bool lists(const std::string& key, const std::string& value) const;
  /// Throws std::runtime_error: "<file>: <key> = <value>: <problem>" .
  [[noreturn]] void refuse(const std::string& key, const std::string& problem) const;

private:
  struct Document;
  /// The value of `key`; nullptr when absent (or null) and there is a fallback; absent
  /// without one: refused.
  const json::Value* present(const std::string& key, bool has_fallback) const;
  std::filesystem::path file_;
  std::unique_ptr<Document> document_;
};

} // namespace sinter
