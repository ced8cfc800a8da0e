// jit/io/pretrained_weights.cpp — the Hugging Face naming schemes, tensor layouts and config files
#include "jit/io/pretrained_weights.hpp"

#include "jit/io/atomic_file.hpp"
#include "jit/io/checkpoint.hpp"
#include "jit/io/json.hpp"

#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace sinter {
namespace {

using Table = std::map<std::string, TensorSource>;

/// `blocks.<i>.<rest>` → (i, rest).
std::optional<std::pair<std::string, std::string>> block_member(const std::string& name) {
  const std::string head = "blocks.";
  if (!name.starts_with(head)) return std::nullopt;
  std::size_t dot = name.find('.', head.size());
  if (dot == std::string::npos || dot == head.size()) return std::nullopt;
  std::string index = name.substr(head.size(), dot - head.size());
  if (index.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::pair{index, name.substr(dot + 1)};
}

/// A scheme from a table of whole-model names and one of per-block names, whose file names
/// are `<layer_prefix><i>.<name>`.
std::function<std::optional<TensorSource>(const std::string&)>
table_source(Table top, Table block, std::string layer_prefix) {
  return [top = std::move(top), block = std::move(block), layer_prefix = std::move(layer_prefix)](
             const std::string& name) -> std::optional<TensorSource> {
    if (auto it = top.find(name); it != top.end()) return it->second;
    auto member = block_member(name);
    if (!member) return std::nullopt;
    auto it = block.find(member->second);
    if (it == block.end()) return std::nullopt;
    TensorSource source = it->second;
    for (std::string& n : source.names)
      n = layer_prefix + member->first + "." + n;
    return source;
  };
}

TensorSource one(std::string name, TensorLayout layout = TensorLayout::same) {
  return {{std::move(name)}, layout};
}

/// nn.Linear `base` as sinter's Linear `into` (`mlp.layers.0`): its weight transposed.
void add_linear(Table& table, const std::string& into, const std::string& base) {
  table[into + ".weight"] = one(base + ".weight", TensorLayout::transposed);
  table[into + ".bias"] = one(base + ".bias");
}

void add_layernorm(Table& table, const std::string& into, const std::string& base) {
  table[into + ".gamma"] = one(base + ".weight");
  table[into + ".beta"] = one(base + ".bias");
}

/// Three nn.Linears (query, key, value under `base`) as one packed qkv Linear.
void add_packed_qkv(Table& table, const std::string& base) {
  auto names = [&](const std::string& field) {
    return std::vector<std::string>{base + ".query." + field, base + ".key." + field,
                                    base + ".value." + field};
  };
  table["attn.qkv.weight"] = {names("weight"), TensorLayout::packed_transposed};
  table["attn.qkv.bias"] = {names("bias"), TensorLayout::packed_transposed};
}

WeightNames make_gpt2() {
  Table top{{"tokens.weight", one("wte.weight")},
            {"position", one("wpe.weight")},
            {"head.weight", one("lm_head.weight", TensorLayout::transposed)},
            {"head.bias", {{}, TensorLayout::zeros}}}; // GPT-2's lm_head has no bias
  add_layernorm(top, "norm", "ln_f");
  // GPT-2's Conv1D stores [in, out], as sinter's Linear does: nothing is transposed.
  Table block;
  add_layernorm(block, "ln1", "ln_1");
  add_layernorm(block, "ln2", "ln_2");
  for (auto [into, base] : {std::pair{"attn.qkv", "attn.c_attn"},
                            {"attn.proj", "attn.c_proj"},
                            {"mlp.layers.0", "mlp.c_fc"},
                            {"mlp.layers.1", "mlp.c_proj"}}) {
    block[std::string(into) + ".weight"] = one(std::string(base) + ".weight");
    block[std::string(into) + ".bias"] = one(std::string(base) + ".bias");
  }
  return {.family = "hf::gpt2",
          .prefixes = {"", "transformer."},
          .source = table_source(std::move(top), std::move(block), "h."),
          .ignorable =
              [](const std::string& name) {
                // The causal-mask buffers older transformers versions saved.
                return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
              },
          .tied = {{"lm_head.weight", "wte.weight"}},
          .task_prefix = "transformer.",
          .head_prefix = "lm_head."};
}

WeightNames make_vit() {
  Table top{{"embed.proj.weight",
             one("embeddings.patch_embeddings.projection.weight", TensorLayout::conv_patches)},
            {"embed.proj.bias", one("embeddings.patch_embeddings.projection.bias")},
            {"cls", {{"embeddings.cls_token"}, TensorLayout::flattened, 3}},
            {"position", {{"embeddings.position_embeddings"}, TensorLayout::flattened, 3}}};
  add_layernorm(top, "norm", "layernorm");
  add_linear(top, "pooler", "pooler.dense");
  add_linear(top, "head", "classifier");
  Table block;
  add_layernorm(block, "ln1", "layernorm_before");
  add_layernorm(block, "ln2", "layernorm_after");
  add_packed_qkv(block, "attention.attention");
  add_linear(block, "attn.proj", "attention.output.dense");
  add_linear(block, "mlp.layers.0", "intermediate.dense");
  add_linear(block, "mlp.layers.1", "output.dense");
  return {.family = "hf::vit",
          .prefixes = {"", "vit."},
          .source = table_source(std::move(top), std::move(block), "encoder.layer."),
          .ignorable = [](const std::string& name) { return name == "embeddings.mask_token"; },
          .tied = {},
          .task_prefix = "vit.",
          .head_prefix = "classifier."};
}

WeightNames make_bert(std::string family, std::string prefix) {
  Table top{{"words.weight", one("embeddings.word_embeddings.weight")},
            {"positions.weight", one("embeddings.position_embeddings.weight")},
            {"token_types.weight", one("embeddings.token_type_embeddings.weight")}};
  add_layernorm(top, "embed_norm", "embeddings.LayerNorm");
  add_linear(top, "pooler", "pooler.dense");
  Table block;
  add_packed_qkv(block, "attention.self");
  add_linear(block, "attn.proj", "attention.output.dense");
  add_layernorm(block, "ln1", "attention.output.LayerNorm");
  add_linear(block, "mlp.layers.0", "intermediate.dense");
  add_linear(block, "mlp.layers.1", "output.dense");
  add_layernorm(block, "ln2", "output.LayerNorm");
  return {.family = std::move(family),
          .prefixes = {"", std::move(prefix)},
          .source = table_source(std::move(top), std::move(block), "encoder.layer."),
          .ignorable =
              [](const std::string& name) {
                return name == "embeddings.position_ids" || name == "embeddings.token_type_ids";
              },
          .tied = {},
          .task_prefix = "",
          .head_prefix = ""};
}

/// The names a file may hold `name` under: each prefix, and the LayerNorm gamma/beta names of
/// checkpoints older transformers versions wrote.
std::vector<std::string> candidates(const WeightNames& names, const std::string& name) {
  std::vector<std::string> out;
  for (const std::string& prefix : names.prefixes) {
    out.push_back(prefix + name);
    for (auto [modern, legacy] : {std::pair{"LayerNorm.weight", "LayerNorm.gamma"},
                                  std::pair{"LayerNorm.bias", "LayerNorm.beta"}})
      if (name.ends_with(modern))
        out.push_back(prefix + name.substr(0, name.size() - std::strlen(modern)) + legacy);
  }
  return out;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names)
    out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

std::vector<float> to_floats(const HostTensor& t) {
  std::vector<float> out(static_cast<std::size_t>(t.size()));
  if (t.dtype() == DType::f32) {
    std::memcpy(out.data(), t.bytes().data(), out.size() * sizeof(float));
    return out;
  }
  for (int64_t i = 0; i < t.size(); ++i)
    out[static_cast<std::size_t>(i)] = static_cast<float>(t.at(i));
  return out;
}

/// `in`, a row-major [rows, cols] matrix, as [cols, rows].
std::vector<float> transposed(const std::vector<float>& in, int64_t rows, int64_t cols) {
  std::vector<float> out(in.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<std::size_t>(c * rows + r)] = in[static_cast<std::size_t>(r * cols + c)];
  return out;
}

/// `s` without leading dims of size 1 beyond `rank` dims ([1, 1, D] → [D] for rank 1).
Shape without_leading_ones(Shape s, std::size_t rank) {
  while (s.size() > rank && s.front() == 1)
    s.erase(s.begin());
  return s;
}

struct Laid {
  Shape shape;
  std::vector<float> values;
};

/// `parts` laid out as `layout` describes; std::invalid_argument says why they cannot be.
Laid lay_out(TensorLayout layout, const std::vector<const HostTensor*>& parts,
             const Shape& wanted) {
  switch (layout) {
  case TensorLayout::zeros:
    return {wanted, std::vector<float>(static_cast<std::size_t>(numel(wanted)), 0.0f)};
  case TensorLayout::same: return {parts[0]->shape(), to_floats(*parts[0])};
  case TensorLayout::flattened:
    return {without_leading_ones(parts[0]->shape(), wanted.size()), to_floats(*parts[0])};
  case TensorLayout::transposed: {
    const Shape& s = parts[0]->shape();
    if (s.size() != 2) throw std::invalid_argument("a Linear weight [out, in] must be 2-D");
    return {{s[1], s[0]}, transposed(to_floats(*parts[0]), s[0], s[1])};
  }
  case TensorLayout::packed_transposed: {
    std::size_t rank = parts[0]->shape().size();
    int64_t total = 0, inner = rank == 2 ? parts[0]->shape()[1] : 1;
    for (const HostTensor* p : parts) {
      if (p->shape().size() != rank || rank < 1 || rank > 2 ||
          (rank == 2 && p->shape()[1] != inner))
        throw std::invalid_argument("the packed parts must be vectors, or matrices [out, " +
                                    std::to_string(inner) + "] alike");
      total += p->shape()[0];
    }
    std::vector<float> out(static_cast<std::size_t>(total * inner));
    int64_t offset = 0;
    for (const HostTensor* p : parts) {
      std::vector<float> in = to_floats(*p);
      int64_t rows = p->shape()[0];
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t i = 0; i < inner; ++i)
          out[static_cast<std::size_t>(i * total + offset + o)] =
              in[static_cast<std::size_t>(o * inner + i)];
      offset += rows;
    }
    return {rank == 2 ? Shape{inner, total} : Shape{total}, std::move(out)};
  }
  case TensorLayout::conv_patches: {
    const Shape& s = parts[0]->shape();
    if (s.size() != 4)
      throw std::invalid_argument("a patch convolution weight [out, channels, P, P] must be 4-D");
    int64_t out_channels = s[0], patch = s[1] * s[2] * s[3];
    return {{patch, out_channels}, transposed(to_floats(*parts[0]), out_channels, patch)};
  }
  }
  throw std::invalid_argument("unknown tensor layout");
}

std::string_view layout_words(TensorLayout layout) {
  switch (layout) {
  case TensorLayout::same: return "";
  case TensorLayout::flattened: return " (leading 1s dropped)";
  case TensorLayout::transposed: return " (transposed from [out, in])";
  case TensorLayout::packed_transposed: return " (query, key and value packed)";
  case TensorLayout::conv_patches: return " (the patch convolution as a Linear)";
  case TensorLayout::zeros: return "";
  }
  return "";
}

} // namespace

namespace hf {
const WeightNames gpt2 = make_gpt2();
const WeightNames vit = make_vit();
const WeightNames bert = make_bert("hf::bert", "bert.");
const WeightNames roberta = make_bert("hf::roberta", "roberta.");
} // namespace hf

std::vector<HostTensor> read_named_weights(const std::filesystem::path& file,
                                           std::span<const WantedTensor> wanted,
                                           const WeightNames& names, bool strict) {
  Checkpoint ckpt = load_safetensors(file);
  const std::string where = "sinter: " + file.string();
  std::set<std::string> used;
  auto find = [&](const std::string& name) -> const std::string* {
    for (const std::string& candidate : candidates(names, name))
      if (auto it = ckpt.tensors.find(candidate); it != ckpt.tensors.end()) return &it->first;
    return nullptr;
  };
  std::vector<HostTensor> out;
  out.reserve(wanted.size());
  for (const WantedTensor& w : wanted) {
    std::optional<TensorSource> source =
        names.source ? names.source(w.name) : TensorSource{{w.name}, TensorLayout::same};
    if (!source)
      throw std::runtime_error(where + ": the model's parameter '" + w.name + "' has no " +
                               names.family +
                               " name — the model is not the one this naming reads (see "
                               "docs/pretrained.md for which model each naming fills)");
    std::vector<const HostTensor*> parts;
    std::vector<std::string> found;
    for (const std::string& n : source->names) {
      const std::string* key = find(n);
      if (!key)
        throw std::runtime_error(
            where + " has no tensor '" + n + "' (tried " + quoted_list(candidates(names, n)) +
            ") for the model's '" + w.name + "' (" + names.family +
            " names) — the file holds another model, or fewer layers or parts than the "
            "model was built with; build it from the file's config.json");
      parts.push_back(&ckpt.tensors.at(*key));
      found.push_back(*key);
      if (!is_float(parts.back()->dtype()))
        throw std::runtime_error(
            where + ": tensor '" + *key + "' is " + std::string(dtype_name(parts.back()->dtype())) +
            ", not floating point: it is no weight of the model's '" + w.name + "'");
    }
    // The common case, a tensor kept as it is in the parameter's dtype: its bytes, copied once.
    bool kept = source->layout == TensorLayout::same || source->layout == TensorLayout::flattened;
    if (kept && parts[0]->dtype() == w.dtype &&
        (source->layout == TensorLayout::same
             ? parts[0]->shape()
             : without_leading_ones(parts[0]->shape(), w.shape.size())) == w.shape) {
      HostTensor t(w.dtype, w.shape);
      std::memcpy(t.bytes().data(), parts[0]->bytes().data(), t.bytes().size());
      require_finite(t, found[0], file);
      used.insert(found.begin(), found.end());
      out.push_back(std::move(t));
      continue;
    }
    Laid laid;
    try {
      laid = lay_out(source->layout, parts, w.shape);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(where + ": tensor " + quoted_list(found) + " of shape " +
                               to_string(parts[0]->shape()) + " cannot make the model's '" +
                               w.name + "': " + e.what());
    }
    if (laid.shape != w.shape)
      throw std::runtime_error(
          where + ": tensor " + quoted_list(found) + " gives " + to_string(laid.shape) +
          std::string(layout_words(source->layout)) + " where the model's '" + w.name + "' is " +
          to_string(w.shape) +
          " — build the model with the configuration that wrote the file (its config.json)");
    HostTensor t(w.dtype, w.shape);
    if (w.dtype == DType::f32)
      std::memcpy(t.bytes().data(), laid.values.data(), laid.values.size() * sizeof(float));
    else
      for (std::size_t i = 0; i < laid.values.size(); ++i)
        t.set(static_cast<int64_t>(i), laid.values[i]);
    require_finite(t, found.empty() ? w.name : found[0], file);
    used.insert(found.begin(), found.end());
    out.push_back(std::move(t));
  }
  // A copy of a tied tensor is read as its original: it must hold the same values.
  for (auto& [copy, original] : names.tied) {
    const std::string* copy_key = find(copy);
    const std::string* original_key = find(original);
    if (!copy_key || !original_key || used.contains(*copy_key) || !used.contains(*original_key))
      continue;
    const HostTensor& a = ckpt.tensors.at(*copy_key);
    const HostTensor& b = ckpt.tensors.at(*original_key);
    bool equal = a.shape() == b.shape() &&
                 (a.dtype() == b.dtype()
                      ? std::memcmp(a.bytes().data(), b.bytes().data(), a.bytes().size()) == 0
                      : a.to_doubles() == b.to_doubles());
    if (!equal)
      throw std::runtime_error(where + ": '" + *copy_key + "' differs from '" + *original_key +
                               "', but the model ties them — build it with its own head "
                               "(GPTConfig::tied_head = false; config.json: "
                               "\"tie_word_embeddings\": false)");
    used.insert(*copy_key);
  }
  if (strict) {
    std::vector<std::string> unused;
    for (auto& [name, tensor] : ckpt.tensors) {
      if (used.contains(name)) continue;
      bool ignored = false;
      for (const std::string& prefix : names.prefixes)
        if (name.starts_with(prefix) && names.ignorable &&
            names.ignorable(name.substr(prefix.size())))
          ignored = true;
      if (!ignored) unused.push_back(name);
    }
    if (!unused.empty())
      throw std::runtime_error(
          where + " holds " + std::to_string(unused.size()) +
          " tensor(s) the model does not read, the first '" + unused.front() +
          "' — build the model with the file's configuration (more layers, a pooler or a "
          "head), or load part of the file with .strict = false");
  }
  return out;
}

// ---- writing ----

namespace {

/// `value` laid out as the file holds it: the parts of `source`, in order.
std::vector<HostTensor> lay_back(const TensorSource& source, const HostTensor& value,
                                 int64_t image_channels, const std::string& name) {
  auto fail = [&](const std::string& why) -> std::runtime_error {
    return std::runtime_error("sinter: cannot write the model's '" + name + "' " +
                              to_string(value.shape()) + ": " + why);
  };
  const Shape& s = value.shape();
  std::vector<float> in = to_floats(value);
  auto tensor = [](Shape shape, const std::vector<float>& values) {
    HostTensor t(DType::f32, std::move(shape));
    std::memcpy(t.bytes().data(), values.data(), values.size() * sizeof(float));
    return t;
  };
  switch (source.layout) {
  case TensorLayout::same: return {tensor(s, in)};
  case TensorLayout::flattened: {
    Shape shape = s;
    while (static_cast<int64_t>(shape.size()) < source.file_rank)
      shape.insert(shape.begin(), 1);
    return {tensor(shape, in)};
  }
  case TensorLayout::zeros:
    for (float v : in)
      if (v != 0.0f) throw fail("the other model has no such parameter, and it is not all zeros");
    return {};
  case TensorLayout::transposed: {
    if (s.size() != 2) throw fail("a Linear weight must be 2-D");
    return {tensor({s[1], s[0]}, transposed(in, s[0], s[1]))};
  }
  case TensorLayout::packed_transposed: {
    auto parts = static_cast<int64_t>(source.names.size());
    int64_t total = s.back();
    if (s.size() > 2 || total % parts != 0)
      throw fail("it does not split into " + std::to_string(parts) + " equal parts");
    int64_t rows = total / parts, inner = s.size() == 2 ? s[0] : 1;
    std::vector<HostTensor> out;
    for (int64_t k = 0; k < parts; ++k) {
      std::vector<float> part(static_cast<std::size_t>(rows * inner));
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t i = 0; i < inner; ++i)
          part[static_cast<std::size_t>(o * inner + i)] =
              in[static_cast<std::size_t>(i * total + k * rows + o)];
      out.push_back(tensor(s.size() == 2 ? Shape{rows, inner} : Shape{rows}, part));
    }
    return out;
  }
  case TensorLayout::conv_patches: {
    if (s.size() != 2 || s[0] % image_channels != 0) throw fail("not a patch projection");
    auto patch = static_cast<int64_t>(std::llround(std::sqrt(double(s[0] / image_channels))));
    if (patch * patch * image_channels != s[0])
      throw fail("not " + std::to_string(image_channels) + " channels of square patches");
    return {tensor({s[1], image_channels, patch, patch}, transposed(in, s[0], s[1]))};
  }
  }
  throw fail("unknown layout");
}

} // namespace

void write_named_weights(const std::filesystem::path& file, std::span<const NamedWeight> weights,
                         const WeightNames& names, int64_t image_channels) {
  if (!names.source)
    throw std::invalid_argument("sinter: write_named_weights needs another library's naming "
                                "(hf::gpt2, hf::vit, hf::bert, hf::roberta); save_weights "
                                "writes sinter's own");
  std::vector<std::pair<std::string, HostTensor>> out;
  bool has_head = false;
  for (const NamedWeight& w : weights) {
    std::optional<TensorSource> source = names.source(w.name);
    if (!source)
      throw std::runtime_error("sinter: the model's parameter '" + w.name + "' has no " +
                               names.family +
                               " name — the model is not the one this naming "
                               "writes (docs/pretrained.md)");
    std::vector<HostTensor> parts = lay_back(*source, *w.value, image_channels, w.name);
    for (std::size_t k = 0; k < parts.size(); ++k) {
      has_head = has_head ||
                 (!names.head_prefix.empty() && source->names[k].starts_with(names.head_prefix));
      out.emplace_back(source->names[k], std::move(parts[k]));
    }
  }
  // As the task model saves itself: its body under its prefix, its head beside it.
  std::vector<std::pair<std::string, const HostTensor*>> named;
  for (auto& [name, tensor] : out) {
    bool head = !names.head_prefix.empty() && name.starts_with(names.head_prefix);
    name = (has_head && !head ? names.task_prefix : "") + name;
    named.emplace_back(name, &tensor);
  }
  save_safetensors(file, named, {{"format", "pt"}});
}

std::string json_number(double value) {
  char text[64];
  auto [end, error] = std::to_chars(text, text + sizeof text, value);
  std::string out(text, end);
  // A whole number keeps a decimal point, so that it reads back as a float.
  if (out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}

ConfigText& ConfigText::add(const std::string& key, int64_t value) {
  return raw(key, std::to_string(value));
}
ConfigText& ConfigText::add(const std::string& key, double value) {
  if (!std::isfinite(value))
    throw std::invalid_argument("sinter: config key " + key + " is not finite");
  return raw(key, json_number(value));
}
ConfigText& ConfigText::add(const std::string& key, bool value) {
  return raw(key, value ? "true" : "false");
}
ConfigText& ConfigText::add(const std::string& key, const std::string& value) {
  std::string quoted;
  json::append_quoted(quoted, value);
  return raw(key, quoted);
}
ConfigText& ConfigText::raw(const std::string& key, const std::string& json_value) {
  text_ += text_.empty() ? "{\n  " : ",\n  ";
  json::append_quoted(text_, key);
  text_ += ": " + json_value;
  return *this;
}
std::string ConfigText::str() const { return (text_.empty() ? "{" : text_) + "\n}\n"; }

void write_model_config(const std::filesystem::path& folder, const ConfigText& config) {
  std::filesystem::create_directories(folder);
  write_file_atomically(folder / "config.json", config.str(), "model configuration");
}

// ---- config.json ----

struct ModelConfigFile::Document {
  json::Value root;
};

std::filesystem::path ModelConfigFile::locate(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) return path / "config.json";
  if (path.extension() == ".json") return path; // config.json, preprocessor_config.json
  return path.parent_path() / "config.json";
}

ModelConfigFile::ModelConfigFile(const std::filesystem::path& path)
    : file_(locate(path)), document_(std::make_unique<Document>()) {
  std::ifstream in(file_, std::ios::binary);
  if (!in)
    throw std::runtime_error("sinter: cannot open " + file_.string() +
                             " — a Hugging Face model folder holds config.json beside its "
                             "model.safetensors (save_pretrained writes both)");
  std::stringstream text;
  text << in.rdbuf();
  try {
    document_->root = json::parse_document(text.str());
  } catch (const json::ParseError& e) {
    throw std::runtime_error("sinter: " + file_.string() + " is not valid JSON: " + e.what());
  }
  if (!document_->root.is(json::Value::Kind::object))
    throw std::runtime_error("sinter: " + file_.string() + " must hold a JSON object");
}

ModelConfigFile::~ModelConfigFile() = default;
ModelConfigFile::ModelConfigFile(ModelConfigFile&&) noexcept = default;
ModelConfigFile& ModelConfigFile::operator=(ModelConfigFile&&) noexcept = default;

bool ModelConfigFile::has(const std::string& key) const {
  const json::Value* v = document_->root.find(key);
  return v && !v->is(json::Value::Kind::null);
}

const json::Value* ModelConfigFile::present(const std::string& key, bool has_fallback) const {
  if (has(key)) return document_->root.find(key);
  if (!has_fallback) refuse(key, "is missing: the model's configuration needs it");
  return nullptr;
}

void ModelConfigFile::refuse(const std::string& key, const std::string& problem) const {
  throw std::runtime_error("sinter: " + file_.string() + ": \"" + key + "\" " + problem);
}

int64_t ModelConfigFile::integer(const std::string& key, std::optional<int64_t> fallback) const {
  const json::Value* found = present(key, fallback.has_value());
  if (!found) return *fallback;
  const json::Value& v = *found;
  if (!v.is(json::Value::Kind::integer) || v.integer > (uint64_t{1} << 40))
    refuse(key, "must be a whole number from 0 to 2^40");
  return static_cast<int64_t>(v.integer);
}

double ModelConfigFile::real(const std::string& key, std::optional<double> fallback) const {
  const json::Value* found = present(key, fallback.has_value());
  if (!found) return *fallback;
  const json::Value& v = *found;
  if (!v.is(json::Value::Kind::integer) && !v.is(json::Value::Kind::number))
    refuse(key, "must be a number");
  return v.number;
}

std::string ModelConfigFile::text(const std::string& key,
                                  std::optional<std::string> fallback) const {
  const json::Value* found = present(key, fallback.has_value());
  if (!found) return *fallback;
  const json::Value& v = *found;
  if (!v.is(json::Value::Kind::string)) refuse(key, "must be a string");
  return v.text;
}

bool ModelConfigFile::flag(const std::string& key, std::optional<bool> fallback) const {
  const json::Value* found = present(key, fallback.has_value());
  if (!found) return *fallback;
  const json::Value& v = *found;
  if (!v.is(json::Value::Kind::boolean)) refuse(key, "must be true or false");
  return v.boolean;
}

std::vector<double> ModelConfigFile::reals(const std::string& key) const {
  std::vector<double> out;
  if (!has(key)) return out;
  const json::Value& v = *document_->root.find(key);
  if (!v.is(json::Value::Kind::array)) refuse(key, "must be an array of numbers");
  for (const json::Value& e : v.elements) {
    if (!e.is(json::Value::Kind::integer) && !e.is(json::Value::Kind::number))
      refuse(key, "must be an array of numbers");
    out.push_back(e.number);
  }
  return out;
}

int64_t ModelConfigFile::count(const std::string& key) const {
  if (!has(key)) return 0;
  const json::Value& v = *document_->root.find(key);
  if (v.is(json::Value::Kind::object)) return static_cast<int64_t>(v.members.size());
  if (v.is(json::Value::Kind::array)) return static_cast<int64_t>(v.elements.size());
  refuse(key, "must be an object or an array");
}

bool ModelConfigFile::lists(const std::string& key, const std::string& value) const {
  if (!has(key)) return false;
  const json::Value& v = *document_->root.find(key);
  if (!v.is(json::Value::Kind::array)) refuse(key, "must be an array");
  for (const json::Value& e : v.elements)
    if (e.is(json::Value::Kind::string) && e.text == value) return true;
  return false;
}

} // namespace sinter
