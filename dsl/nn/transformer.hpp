// dsl/nn/transformer.hpp — attention, the transformer block, and ViT / GPT / BERT models
#pragma once
#include "dsl/nn/layers.hpp"

namespace sinter {

/// Multi-head self-attention over [B, T, D], optionally causal.
struct MultiHeadAttention {
  BOOST_HANA_DEFINE_STRUCT(MultiHeadAttention, (Linear, qkv), (Linear, proj));
  int64_t heads = 1;
  bool causal = false;

  MultiHeadAttention() = default;
  MultiHeadAttention(int64_t dim, int64_t num_heads, bool is_causal, Init& init)
      : qkv(dim, 3 * dim, init), proj(dim, dim, init), heads(num_heads), causal(is_causal) {
    if (num_heads < 1)
      throw std::invalid_argument("sinter: attention needs at least 1 head, got " +
                                  std::to_string(num_heads));
    if (dim % num_heads != 0)
      throw std::invalid_argument("sinter: attention width " + std::to_string(dim) +
                                  " is not divisible by " + std::to_string(num_heads) + " heads");
  }

  /// `key_mask` (optional, [B, T], 1 = attend, 0 = padding: Hugging Face's attention_mask)
  /// keeps every query from attending to padded keys.
  Var operator()(const Var& x, const Var& key_mask = {}) const {
    module_scope self(qkv.weight, "qkv.weight");
    Shape s = x.value().shape();
    if (s.size() != 3)
      throw ShapeError("sinter: attention expects [batch, tokens, dim], got " + to_string(s));
    int64_t b = s[0], t = s[1], d = s[2], dh = d / heads;
    // Each child runs in a scope named like its parameters (kernel names, error paths).
    Var projected;
    {
      scope in_qkv("qkv");
      projected = qkv(x);
    }
    Value packed = reshape(projected.value(), {b, t, 3, heads, dh});
    // q, k and v: the batch stays dim 0 throughout (in-step sifting reads rows of these values
    // along it, docs/sifting.md).
    auto part = [&](int64_t i) {
      Value one =
          reshape(slice(packed, {0, 0, i, 0, 0}, {b, t, i + 1, heads, dh}), {b, t, heads, dh});
      return permute(one, {0, 2, 1, 3}); // [B, H, T, Dh]
    };
    Value q = part(0), k = part(1), v = part(2);
    AttentionOptions options{.causal = causal};
    if (key_mask) {
      Shape ms = key_mask.value().shape();
      if (ms != Shape{b, t})
        throw ShapeError("sinter: attention's key mask must be [batch, tokens] = " +
                         to_string(Shape{b, t}) + ", got " + to_string(ms));
      options.mask =
          reshape(greater(key_mask.value(), scalar_like(key_mask.value(), 0.5)), {b, 1, 1, t});
    }
    Value attended = sinter::attention(q, k, v, options);               // [B, H, T, Dh]
    Value merged = reshape(permute(attended, {0, 2, 1, 3}), {b, t, d}); // [B, T, D]
    scope in_proj("proj");
    return proj(Var(merged));
  }
};

/// Scaled dot-product attention over Vars (ops/value.hpp's attention: q [..., Tq, D],
/// k [..., Tk, D], v [..., Tk, Dv]; options causal, scale, bool mask).
inline Var attention(const Var& q, const Var& k, const Var& v,
                     const AttentionOptions& options = {}) {
  return Var(sinter::attention(q.value(), k.value(), v.value(), options));
}

/// What sets one family's transformer block apart from another's.
struct BlockOptions {
  int64_t mlp_hidden = 0;                   ///< the MLP's hidden width; 0: 4 × dim
  Activation activation = Activation::gelu; ///< GPT-2: gelu (tanh); BERT, ViT: gelu_exact
  double norm_eps = 1e-5;                   ///< LayerNorm epsilon (BERT, ViT: 1e-12)
  bool post_norm = false;                   ///< BERT's order: normalise after each residual
};

/// Pre-norm block (GPT-2, ViT): x + attn(ln1(x)), then x + mlp(ln2(x)). Post-norm (BERT):
/// ln1(x + attn(x)), then ln2(x + mlp(x)). The MLP is two Linears with a GELU between them.
struct TransformerBlock {
  BOOST_HANA_DEFINE_STRUCT(TransformerBlock, (LayerNorm, ln1), (MultiHeadAttention, attn),
                           (LayerNorm, ln2), (MLP, mlp));
  bool post_norm = false;

  TransformerBlock() = default;
  TransformerBlock(int64_t dim, int64_t heads, bool causal, Init& init,
                   const BlockOptions& options = {})
      : ln1(dim, init, options.norm_eps), attn(dim, heads, causal, init),
        ln2(dim, init, options.norm_eps),
        mlp({dim, options.mlp_hidden > 0 ? options.mlp_hidden : 4 * dim, dim}, init,
            options.activation),
        post_norm(options.post_norm) {}

  /// `key_mask`: as MultiHeadAttention's.
  Var operator()(const Var& x, const Var& key_mask = {}) const {
    module_scope self(ln1.gamma, "ln1.gamma");
    if (post_norm) return post_norm_forward(x, key_mask);
    Var normed, attended, normed2, transformed;
    {
      scope in_ln1("ln1");
      normed = ln1(x);
    }
    {
      scope in_attn("attn");
      attended = attn(normed, key_mask);
    }
    Var h = Var(x.value() + attended.value());
    {
      scope in_ln2("ln2");
      normed2 = ln2(h);
    }
    {
      scope in_mlp("mlp");
      transformed = mlp(normed2);
    }
    return Var(h.value() + transformed.value());
  }

private:
  Var post_norm_forward(const Var& x, const Var& key_mask) const {
    Var attended, h, transformed;
    {
      scope in_attn("attn");
      attended = attn(x, key_mask);
    }
    {
      scope in_ln1("ln1");
      h = ln1(Var(x.value() + attended.value()));
    }
    {
      scope in_mlp("mlp");
      transformed = mlp(h);
    }
    scope in_ln2("ln2");
    return ln2(Var(h.value() + transformed.value()));
  }
};

/// Cuts [B, H, W] images into non-overlapping P×P patches and projects each to `dim`.
struct PatchEmbed {
  BOOST_HANA_DEFINE_STRUCT(PatchEmbed, (Linear, proj));
  int64_t patch = 1;
  int64_t channels = 1;

  PatchEmbed() = default;
  PatchEmbed(int64_t patch_size, int64_t dim, Init& init, int64_t image_channels = 1)
      : proj(image_channels * patch_size * patch_size, dim, init), patch(patch_size),
        channels(image_channels) {}

  Var operator()(const Var& images) const {
    module_scope self(proj.weight, "proj.weight");
    Shape s = images.value().shape();
    // One channel: [B, H, W]; several: [B, C, H, W] (channels first, as PyTorch's images).
    bool planar = channels > 1;
    std::size_t h = planar ? 2 : 1;
    if (s.size() != h + 2 || (planar && s[1] != channels) || s[h] % patch != 0 ||
        s[h + 1] % patch != 0)
      throw ShapeError("sinter: PatchEmbed expects " +
                       std::string(planar ? "[batch, " + std::to_string(channels) + ", H, W]"
                                          : "[batch, H, W]") +
                       " with H and W multiples of " + std::to_string(patch) + ", got " +
                       to_string(s));
    int64_t b = s[0], gh = s[h] / patch, gw = s[h + 1] / patch;
    Value grid = reshape(images.value(), {b, channels, gh, patch, gw, patch});
    // [B, gh, gw, C, P, P]: each patch flattened channel-major, then row-major.
    Value patches =
        reshape(permute(grid, {0, 2, 4, 1, 3, 5}), {b, gh * gw, channels * patch * patch});
    return proj(Var(patches));
  }
};

struct ViTConfig {
  int64_t image = 28, patch = 7, dim = 64, depth = 4, heads = 4;
  int64_t classes = 10; ///< 0: no head; the model returns the pooled features [B, dim]
  int64_t channels = 1; ///< 1: images [B, image, image]; C > 1: [B, C, image, image]
  /// Hugging Face's ViT (docs/pretrained.md): a learned class token before the patches, whose
  /// final state is pooled (off: the mean over the patch tokens is).
  bool class_token = false;
  bool pooler = false; ///< ViTModel's pooler: tanh(Linear(pooled)) before the head
  int64_t mlp_hidden = 0;
  Activation activation = Activation::gelu;
  double norm_eps = 1e-5;

  BlockOptions block() const {
    return {.mlp_hidden = mlp_hidden, .activation = activation, .norm_eps = norm_eps};
  }
};

/// Vision transformer: patches (+ class token) + learned positions → blocks → LayerNorm →
/// class token or mean over tokens (→ pooler) → class logits.
struct ViT {
  BOOST_HANA_DEFINE_STRUCT(ViT, (PatchEmbed, embed), (std::optional<Parameter>, cls),
                           (Parameter, position), (std::vector<TransformerBlock>, blocks),
                           (LayerNorm, norm), (std::optional<Linear>, pooler),
                           (std::optional<Linear>, head));

  ViT() = default;
  ViT(const ViTConfig& c, Init& init)
      : embed(c.patch, c.dim, init, c.channels),
        position(
            init.normal(
                {(c.image / c.patch) * (c.image / c.patch) + (c.class_token ? 1 : 0), c.dim}, 0.02),
            ParameterRole::embedding),
        norm(c.dim, init, c.norm_eps) {
    if (c.class_token) cls.emplace(init.normal({c.dim}, 0.02), ParameterRole::embedding);
    for (int64_t i = 0; i < c.depth; ++i)
      blocks.emplace_back(c.dim, c.heads, false, init, c.block());
    if (c.pooler) pooler.emplace(c.dim, c.dim, init);
    if (c.classes > 0) head.emplace(c.dim, c.classes, init);
  }

  Var operator()(const Var& images) const {
    module_scope self(position, "position");
    Var embedded;
    {
      scope in_embed("embed");
      embedded = embed(images);
    }
    Value tokens = embedded.value();
    Shape s = tokens.shape(); // [B, N, D]
    if (cls) {
      Value first = broadcast_to(reshape(cls->node(), {1, 1, s[2]}), {s[0], 1, s[2]});
      Value parts[] = {first, tokens};
      tokens = concat(parts, 1);
    }
    Var x = Var(tokens + position.node());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      scope in_block("blocks." + std::to_string(i));
      x = blocks[i](x);
    }
    Var pooled;
    {
      scope in_norm("norm");
      Value normed = norm(x).value();
      pooled = Var(cls ? reshape(slice(normed, {0, 0, 0}, {s[0], 1, s[2]}), {s[0], s[2]})
                       : mean(normed, {1}));
    }
    if (pooler) {
      scope in_pooler("pooler");
      pooled = Var(tanh((*pooler)(pooled).value()));
    }
    if (!head) return pooled;
    scope in_head("head");
    return (*head)(pooled);
  }
};

struct GPTConfig {
  int64_t vocab = 256, context = 64, dim = 128, depth = 4, heads = 4;
  /// GPT-2's: the logits are the final states times the token table transposed (no head of its
  /// own, no bias).
  bool tied_head = false;
  int64_t mlp_hidden = 0;
  Activation activation = Activation::gelu;
  double norm_eps = 1e-5;

  BlockOptions block() const {
    return {.mlp_hidden = mlp_hidden, .activation = activation, .norm_eps = norm_eps};
  }
};

/// Decoder-only language model: token + position embeddings → causal blocks → LayerNorm →
/// next-token logits [B, T, vocab].
struct GPT {
  BOOST_HANA_DEFINE_STRUCT(GPT, (Embedding, tokens), (Parameter, position),
                           (std::vector<TransformerBlock>, blocks), (LayerNorm, norm),
                           (std::optional<Linear>, head));

  GPT() = default;
  GPT(const GPTConfig& c, Init& init)
      : tokens(c.vocab, c.dim, init),
        position(init.normal({c.context, c.dim}, 0.02), ParameterRole::embedding),
        norm(c.dim, init, c.norm_eps) {
    for (int64_t i = 0; i < c.depth; ++i)
      blocks.emplace_back(c.dim, c.heads, true, init, c.block());
    if (!c.tied_head) head.emplace(c.dim, c.vocab, init);
  }

  Var operator()(const Var& ids) const {
    module_scope self(position, "position");
    Shape s = ids.value().shape();
    int64_t t = s.at(1), context = position.value.shape()[0];
    if (t > context)
      throw ShapeError("sinter: GPT context is " + std::to_string(context) + " tokens, got " +
                       std::to_string(t));
    Value pos = slice(position.node(), {0, 0}, {t, position.value.shape()[1]});
    Var embedded;
    {
      scope in_tokens("tokens");
      embedded = tokens(ids);
    }
    Var x = Var(embedded.value() + pos);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      scope in_block("blocks." + std::to_string(i));
      x = blocks[i](x);
    }
    Var normed;
    {
      scope in_norm("norm");
      normed = norm(x);
    }
    scope in_head("head");
    if (!head) return Var(matmul(normed.value(), transpose(tokens.weight.node(), 0, 1)));
    return (*head)(normed);
  }
};

struct BertConfig {
  int64_t vocab = 30522, context = 512, type_vocab = 2, dim = 768, depth = 12, heads = 12;
  int64_t mlp_hidden = 0;
  Activation activation = Activation::gelu_exact;
  double norm_eps = 1e-12;
  /// The row of the position table that position 0 reads: 0 for BERT; RoBERTa's is its padding
  /// id + 1 (2), and its table has that many more rows.
  int64_t position_offset = 0;
  bool pooler = true; ///< tanh(Linear(the first token's final state)): BertModel's pooler_output

  BlockOptions block() const {
    return {.mlp_hidden = mlp_hidden,
            .activation = activation,
            .norm_eps = norm_eps,
            .post_norm = true};
  }
};

/// BERT / RoBERTa encoder: word + position + token-type embeddings → LayerNorm → post-norm
/// blocks → final states [B, T, dim]; `pool` gives BertModel's pooler output [B, dim].
struct Bert {
  BOOST_HANA_DEFINE_STRUCT(Bert, (Embedding, words), (Embedding, positions),
                           (Embedding, token_types), (LayerNorm, embed_norm),
                           (std::vector<TransformerBlock>, blocks),
                           (std::optional<Linear>, pooler));
  int64_t position_offset = 0;

  Bert() = default;
  Bert(const BertConfig& c, Init& init)
      : words(c.vocab, c.dim, init), positions(c.context + c.position_offset, c.dim, init),
        token_types(c.type_vocab, c.dim, init), embed_norm(c.dim, init, c.norm_eps),
        position_offset(c.position_offset) {
    for (int64_t i = 0; i < c.depth; ++i)
      blocks.emplace_back(c.dim, c.heads, false, init, c.block());
    if (c.pooler) pooler.emplace(c.dim, c.dim, init);
  }

  /// ids [B, T] → final states [B, T, dim]. `token_types` [B, T] (absent: all 0, as
  /// Hugging Face's default); `mask` [B, T] (1 = token, 0 = padding, at the end of each row).
  Var operator()(const Var& ids, const Var& types = {}, const Var& mask = {}) const {
    module_scope self(words.weight, "words.weight");
    Shape s = ids.value().shape();
    if (s.size() != 2)
      throw ShapeError("sinter: Bert expects token ids [batch, tokens], got " + to_string(s));
    int64_t t = s[1], dim = words.weight.value.shape()[1];
    int64_t rows = positions.weight.value.shape()[0];
    if (t + position_offset > rows)
      throw ShapeError("sinter: Bert's context is " + std::to_string(rows - position_offset) +
                       " tokens, got " + std::to_string(t));
    Var x;
    {
      scope in_embed("embed");
      Value pos = slice(positions.weight.node(), {position_offset, 0}, {position_offset + t, dim});
      Value type_rows =
          types ? token_types(types).value()
                : broadcast_to(slice(token_types.weight.node(), {0, 0}, {1, dim}), {s[0], t, dim});
      Value sum = words(ids).value() + pos + type_rows;
      scope in_norm("embed_norm");
      x = embed_norm(Var(sum));
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      scope in_block("blocks." + std::to_string(i));
      x = blocks[i](x, mask);
    }
    return x;
  }

  /// BertModel's pooler output: tanh(Linear(states[:, 0])), [B, dim].
  Var pool(const Var& states) const {
    if (!pooler)
      throw std::logic_error("sinter: this Bert was built without a pooler (BertConfig::pooler)");
    Shape s = states.value().shape();
    scope in_pooler("pooler");
    Value first = reshape(slice(states.value(), {0, 0, 0}, {s[0], 1, s[2]}), {s[0], s[2]});
    return Var(tanh((*pooler)(Var(first)).value()));
  }
};

} // namespace sinter
