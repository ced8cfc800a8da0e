// dsl/nn/transformer.hpp — attention, the pre-norm transformer block, and ViT / GPT models
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

  Var operator()(const Var& x) const {
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
    Value attended = sinter::attention(q, k, v, {.causal = causal});    // [B, H, T, Dh]
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

/// Pre-norm block: x + attn(ln1(x)), then x + mlp(ln2(x)) with a 4× GELU MLP.
struct TransformerBlock {
  BOOST_HANA_DEFINE_STRUCT(TransformerBlock, (LayerNorm, ln1), (MultiHeadAttention, attn),
                           (LayerNorm, ln2), (MLP, mlp));

  TransformerBlock() = default;
  TransformerBlock(int64_t dim, int64_t heads, bool causal, Init& init)
      : ln1(dim, init), attn(dim, heads, causal, init), ln2(dim, init),
        mlp({dim, 4 * dim, dim}, init, Activation::gelu) {}

  Var operator()(const Var& x) const {
    module_scope self(ln1.gamma, "ln1.gamma");
    Var normed, attended, normed2, transformed;
    {
      scope in_ln1("ln1");
      normed = ln1(x);
    }
    {
      scope in_attn("attn");
      attended = attn(normed);
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
  int64_t image = 28, patch = 7, dim = 64, depth = 4, heads = 4, classes = 10;
  int64_t channels = 1; ///< 1: images [B, image, image]; C > 1: [B, C, image, image]
};

/// Vision transformer: patches + learned positions → blocks → LayerNorm → mean over tokens →
/// class logits.
struct ViT {
  BOOST_HANA_DEFINE_STRUCT(ViT, (PatchEmbed, embed), (Parameter, position),
                           (std::vector<TransformerBlock>, blocks), (LayerNorm, norm),
                           (Linear, head));

  ViT() = default;
  ViT(const ViTConfig& c, Init& init)
      : embed(c.patch, c.dim, init, c.channels),
        position(init.normal({(c.image / c.patch) * (c.image / c.patch), c.dim}, 0.02),
                 ParameterRole::embedding),
        norm(c.dim, init), head(c.dim, c.classes, init) {
    for (int64_t i = 0; i < c.depth; ++i)
      blocks.emplace_back(c.dim, c.heads, false, init);
  }

  Var operator()(const Var& images) const {
    module_scope self(position, "position");
    Var embedded;
    {
      scope in_embed("embed");
      embedded = embed(images);
    }
    Var x = Var(embedded.value() + position.node());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      scope in_block("blocks." + std::to_string(i));
      x = blocks[i](x);
    }
    Var pooled;
    {
      scope in_norm("norm");
      pooled = Var(mean(norm(x).value(), {1}));
    }
    scope in_head("head");
    return head(pooled);
  }
};

struct GPTConfig {
  int64_t vocab = 256, context = 64, dim = 128, depth = 4, heads = 4;
};

/// Decoder-only language model: token + position embeddings → causal blocks → LayerNorm →
/// next-token logits [B, T, vocab].
struct GPT {
  BOOST_HANA_DEFINE_STRUCT(GPT, (Embedding, tokens), (Parameter, position),
                           (std::vector<TransformerBlock>, blocks), (LayerNorm, norm),
                           (Linear, head));

  GPT() = default;
  GPT(const GPTConfig& c, Init& init)
      : tokens(c.vocab, c.dim, init),
        position(init.normal({c.context, c.dim}, 0.02), ParameterRole::embedding),
        norm(c.dim, init), head(c.dim, c.vocab, init) {
    for (int64_t i = 0; i < c.depth; ++i)
      blocks.emplace_back(c.dim, c.heads, true, init);
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
    return head(normed);
  }
};

} // namespace sinter
