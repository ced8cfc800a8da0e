// dsl/pretrained.hpp — Hugging Face models' config.json as sinter configurations (GPT-2, ViT,
// BERT, RoBERTa); their weights load with load_weights(file, model, {.names = hf::…})
#pragma once
#include "dsl/checkpoint.hpp"
#include "dsl/nn/transformer.hpp"
#include "jit/io/pretrained_weights.hpp"

#include <filesystem>
#include <string>

namespace sinter::hf {

namespace detail {

inline void require_model_type(const ModelConfigFile& c, std::initializer_list<const char*> types,
                               const std::string& reader) {
  if (!c.has("model_type")) return;
  std::string type = c.text("model_type");
  for (const char* t : types)
    if (type == t) return;
  c.refuse("model_type", "is \"" + type + "\": " + reader +
                             " reads another family's config (gpt2_config: gpt2; vit_config: "
                             "vit; bert_config: bert, roberta)");
}

inline Activation activation(const ModelConfigFile& c, const std::string& key,
                             const std::string& fallback) {
  std::string name = c.text(key, fallback);
  if (name == "gelu") return Activation::gelu_exact;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::gelu;
  if (name == "relu") return Activation::relu;
  c.refuse(key, "is \"" + name +
                    "\", which sinter has no activation for (it has gelu, gelu_new, "
                    "gelu_pytorch_tanh and relu)");
}

inline void require_flag(const ModelConfigFile& c, const std::string& key, bool fallback,
                         bool wanted) {
  if (c.flag(key, fallback) != wanted)
    c.refuse(key, std::string("is ") + (wanted ? "false" : "true") +
                      ": sinter's modules implement only " + (wanted ? "true" : "false"));
}

/// A size from the file, at least `min`: what a module can be built with.
inline int64_t size(const ModelConfigFile& c, const std::string& key,
                    std::optional<int64_t> fallback = {}, int64_t min = 1) {
  int64_t value = c.integer(key, fallback);
  if (value < min)
    c.refuse(key, "is " + std::to_string(value) + ": it must be at least " + std::to_string(min));
  return value;
}

inline void require_divides(const ModelConfigFile& c, const std::string& heads_key, int64_t heads,
                            const std::string& width_key, int64_t width) {
  if (width % heads != 0)
    c.refuse(heads_key, "is " + std::to_string(heads) + ", which does not divide \"" + width_key +
                            "\" (" + std::to_string(width) + ")");
}

inline double epsilon(const ModelConfigFile& c, const std::string& key, double fallback) {
  double eps = c.real(key, fallback);
  if (!(eps > 0.0)) c.refuse(key, "must be above 0");
  return eps;
}

} // namespace detail

/// Each reader refuses, naming the file and the key, a size below 1, heads that do not divide
/// the width, an epsilon of 0 or less, and a setting sinter's modules lack.

/// GPTConfig of a GPT2LMHeadModel / GPT2Model folder (or its config.json, or a file beside it):
/// tied head unless "tie_word_embeddings" is false, learned positions, gelu_new.
inline GPTConfig gpt2_config(const std::filesystem::path& path) {
  ModelConfigFile c(path);
  detail::require_model_type(c, {"gpt2"}, "gpt2_config");
  detail::require_flag(c, "scale_attn_weights", true, true);
  detail::require_flag(c, "scale_attn_by_inverse_layer_idx", false, false);
  GPTConfig g{.vocab = detail::size(c, "vocab_size"),
              .context = detail::size(c, "n_positions"),
              .dim = detail::size(c, "n_embd"),
              .depth = detail::size(c, "n_layer"),
              .heads = detail::size(c, "n_head"),
              .tied_head = c.flag("tie_word_embeddings", true),
              .mlp_hidden = detail::size(c, "n_inner", 0, 0),
              .activation = detail::activation(c, "activation_function", "gelu_new"),
              .norm_eps = detail::epsilon(c, "layer_norm_epsilon", 1e-5)};
  detail::require_divides(c, "n_head", g.heads, "n_embd", g.dim);
  return g;
}

/// ViTConfig of a ViTModel (pooler, no head) or ViTForImageClassification (a head of
/// len(id2label) classes, no pooler) folder: class token, exact GELU, LayerNorm eps 1e-12.
inline ViTConfig vit_config(const std::filesystem::path& path) {
  ModelConfigFile c(path);
  detail::require_model_type(c, {"vit"}, "vit_config");
  detail::require_flag(c, "qkv_bias", true, true);
  bool classifier = c.lists("architectures", "ViTForImageClassification");
  // Square images and patches: one whole number each ([h, w] pairs are refused by key).
  int64_t image = detail::size(c, "image_size"), patch = detail::size(c, "patch_size");
  if (image % patch != 0)
    c.refuse("patch_size", "must divide image_size (" + std::to_string(image) + ")");
  int64_t dim = detail::size(c, "hidden_size"), heads = detail::size(c, "num_attention_heads");
  detail::require_divides(c, "num_attention_heads", heads, "hidden_size", dim);
  return {.image = image,
          .patch = patch,
          .dim = dim,
          .depth = detail::size(c, "num_hidden_layers"),
          .heads = heads,
          .classes = !classifier               ? 0
                     : c.count("id2label") > 0 ? c.count("id2label")
                                               : detail::size(c, "num_labels", 2),
          .channels = detail::size(c, "num_channels", 3),
          .class_token = true,
          .pooler = !classifier,
          .mlp_hidden = detail::size(c, "intermediate_size"),
          .activation = detail::activation(c, "hidden_act", "gelu"),
          .norm_eps = detail::epsilon(c, "layer_norm_eps", 1e-12)};
}

/// BertConfig of a BertModel / RobertaModel folder (or of a Bert…/Roberta… task model's
/// encoder): post-norm blocks, exact GELU, absolute positions (RoBERTa's from padding id + 1).
/// The pooler is there for BertModel, RobertaModel and the BERT models whose heads read it.
inline BertConfig bert_config(const std::filesystem::path& path) {
  ModelConfigFile c(path);
  detail::require_model_type(c, {"bert", "roberta"}, "bert_config");
  if (c.text("position_embedding_type", "absolute") != "absolute")
    c.refuse("position_embedding_type", "is not \"absolute\": sinter's Bert has only absolute "
                                        "positions");
  bool roberta = c.text("model_type", "bert") == "roberta";
  int64_t offset = roberta ? detail::size(c, "pad_token_id", 1, 0) + 1 : 0;
  int64_t positions = detail::size(c, "max_position_embeddings");
  int64_t dim = detail::size(c, "hidden_size"), heads = detail::size(c, "num_attention_heads");
  detail::require_divides(c, "num_attention_heads", heads, "hidden_size", dim);
  if (positions <= offset)
    c.refuse("max_position_embeddings",
             "must exceed the padding id + 1 (" + std::to_string(offset) + ")");
  bool pooler = c.count("architectures") == 0;
  for (const char* with_pooler :
       {"BertModel", "RobertaModel", "BertForSequenceClassification", "BertForPreTraining",
        "BertForNextSentencePrediction", "BertForMultipleChoice", "RobertaForMultipleChoice"})
    pooler = pooler || c.lists("architectures", with_pooler);
  return {.vocab = detail::size(c, "vocab_size"),
          .context = positions - offset,
          .type_vocab = detail::size(c, "type_vocab_size", 2),
          .dim = dim,
          .depth = detail::size(c, "num_hidden_layers"),
          .heads = heads,
          .mlp_hidden = detail::size(c, "intermediate_size"),
          .activation = detail::activation(c, "hidden_act", "gelu"),
          .norm_eps = detail::epsilon(c, "layer_norm_eps", 1e-12),
          .position_offset = offset,
          .pooler = pooler};
}

/// The naming of a folder's model_type: hf::gpt2, hf::vit, hf::bert or hf::roberta.
inline const WeightNames& names_for(const std::filesystem::path& path) {
  ModelConfigFile c(path);
  std::string type = c.text("model_type");
  if (type == "gpt2") return gpt2;
  if (type == "vit") return vit;
  if (type == "bert") return bert;
  if (type == "roberta") return roberta;
  c.refuse("model_type", "is \"" + type + "\": sinter reads gpt2, vit, bert and roberta models");
}

/// The weights file of a Hugging Face folder (model.safetensors), or `path` itself.
inline std::filesystem::path weights_file(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path)) return path;
  std::filesystem::path file = path / "model.safetensors";
  if (!std::filesystem::exists(file))
    throw std::runtime_error("sinter: " + path.string() +
                             " holds no model.safetensors — save the model with "
                             "save_pretrained(…, safe_serialization=True)");
  return file;
}

namespace detail {

inline std::string activation_name(Activation a) {
  switch (a) {
  case Activation::gelu: return "gelu_new";
  case Activation::gelu_exact: return "gelu";
  case Activation::relu: return "relu";
  }
  throw std::invalid_argument("sinter: unknown Activation");
}

/// Every parameter of `model` for write_named_weights.
template <class Model> std::vector<NamedWeight> weights_of(Model& model) {
  std::vector<NamedWeight> out;
  for_each_parameter(
      model, [&](const std::string& name, Parameter& p) { out.push_back({name, &p.value}); });
  return out;
}

/// The keys BERT's and ViT's configurations share (no dropout: sinter's modules have none).
inline void add_encoder_keys(ConfigText& config, int64_t dim, int64_t depth, int64_t heads,
                             int64_t mlp_hidden, Activation activation, double norm_eps) {
  config.add("hidden_size", dim)
      .add("num_hidden_layers", depth)
      .add("num_attention_heads", heads)
      .add("intermediate_size", mlp_hidden > 0 ? mlp_hidden : 4 * dim)
      .add("hidden_act", activation_name(activation))
      .add("layer_norm_eps", norm_eps)
      .add("hidden_dropout_prob", 0.0)
      .add("attention_probs_dropout_prob", 0.0);
}

inline std::string labels(int64_t classes, bool by_id) {
  std::string text = "{";
  for (int64_t i = 0; i < classes; ++i) {
    std::string id = std::to_string(i), label = "LABEL_" + id;
    text +=
        (i ? ", \"" : "\"") + (by_id ? id : label) + "\": " + (by_id ? "\"" + label + "\"" : id);
  }
  return text + "}";
}

} // namespace detail

/// Writes `model` as transformers' save_pretrained would: `folder`/model.safetensors by the
/// family's names and layouts, and `folder`/config.json for `config` (the one the model was
/// built with), both atomically; `GPT2LMHeadModel.from_pretrained(folder)` then gives the same
/// logits. An untied GPT's head bias must be zeros (GPT-2's lm_head has none).
inline void save_pretrained(const std::filesystem::path& folder, GPT& model, const GPTConfig& c) {
  std::filesystem::create_directories(folder);
  write_named_weights(folder / "model.safetensors", detail::weights_of(model), gpt2);
  ConfigText config;
  config.add("model_type", "gpt2")
      .raw("architectures", "[\"GPT2LMHeadModel\"]")
      .add("vocab_size", c.vocab)
      .add("n_positions", c.context)
      .add("n_embd", c.dim)
      .add("n_layer", c.depth)
      .add("n_head", c.heads)
      .raw("n_inner", c.mlp_hidden > 0 ? std::to_string(c.mlp_hidden) : "null")
      .add("activation_function", detail::activation_name(c.activation))
      .add("layer_norm_epsilon", c.norm_eps)
      .add("tie_word_embeddings", c.tied_head)
      .add("resid_pdrop", 0.0)
      .add("embd_pdrop", 0.0)
      .add("attn_pdrop", 0.0);
  write_model_config(folder, config);
}

/// ViTForImageClassification (with a head) or ViTModel (without; it must have the pooler), as
/// above. transformers' ViT reads its class token: a mean-pooled ViT (class_token = false) is
/// refused.
inline void save_pretrained(const std::filesystem::path& folder, ViT& model, const ViTConfig& c) {
  if (!c.class_token)
    throw std::invalid_argument("sinter: transformers' ViT pools its class token; this ViT "
                                "averages its tokens — build it with class_token = true");
  if (c.classes > 0 && c.pooler)
    throw std::invalid_argument("sinter: ViTForImageClassification has no pooler; build the "
                                "ViT with pooler = false");
  if (c.classes == 0 && !c.pooler)
    throw std::invalid_argument("sinter: ViTModel has a pooler; build the ViT with pooler = true");
  std::filesystem::create_directories(folder);
  write_named_weights(folder / "model.safetensors", detail::weights_of(model), vit, c.channels);
  ConfigText config;
  config.add("model_type", "vit")
      .raw("architectures", c.classes > 0 ? "[\"ViTForImageClassification\"]" : "[\"ViTModel\"]")
      .add("image_size", c.image)
      .add("patch_size", c.patch)
      .add("num_channels", c.channels)
      .add("qkv_bias", true);
  detail::add_encoder_keys(config, c.dim, c.depth, c.heads, c.mlp_hidden, c.activation, c.norm_eps);
  if (c.classes > 0)
    config.raw("id2label", detail::labels(c.classes, true))
        .raw("label2id", detail::labels(c.classes, false));
  write_model_config(folder, config);
}

/// BertModel, or RobertaModel when position_offset > 0 (its pad_token_id is the offset - 1),
/// as above.
inline void save_pretrained(const std::filesystem::path& folder, Bert& model, const BertConfig& c) {
  bool roberta = c.position_offset > 0;
  std::filesystem::create_directories(folder);
  write_named_weights(folder / "model.safetensors", detail::weights_of(model),
                      roberta ? hf::roberta : hf::bert);
  ConfigText config;
  config.add("model_type", roberta ? "roberta" : "bert")
      .raw("architectures", roberta ? "[\"RobertaModel\"]" : "[\"BertModel\"]")
      .add("vocab_size", c.vocab)
      .add("max_position_embeddings", c.context + c.position_offset)
      .add("type_vocab_size", c.type_vocab)
      .add("pad_token_id", roberta ? c.position_offset - 1 : int64_t{0})
      .add("position_embedding_type", "absolute");
  detail::add_encoder_keys(config, c.dim, c.depth, c.heads, c.mlp_hidden, c.activation, c.norm_eps);
  write_model_config(folder, config);
}

} // namespace sinter::hf
