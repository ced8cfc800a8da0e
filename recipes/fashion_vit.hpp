// recipes/fashion_vit.hpp — the Fashion-MNIST ViT (vit recipe, distill's teacher and student)
#pragma once
#include "dsl/sinter.hpp"
#include "recipe_support.hpp"

namespace recipe {

/// Standardised images [B, 28, 28] → ViT → 10 logits.
struct FashionViT {
  BOOST_HANA_DEFINE_STRUCT(FashionViT, (sinter::ViT, vit));

  FashionViT(const sinter::ViTConfig& config, sinter::Init& init) : vit(config, init) {}
  sinter::Var operator()(const sinter::Var& images) const {
    // Fashion-MNIST's pixel mean and standard deviation.
    return vit(sinter::Var((images.value() - 0.2860) * (1.0 / 0.3530)));
  }
};

/// The ViT of `--<prefix>patch/dim/depth/heads` for 28×28 images and 10 classes; bad values
/// exit 2 naming the flags.
inline sinter::ViTConfig vit_config(const Flags& flags, const std::string& prefix = "") {
  sinter::ViTConfig config{.image = 28,
                           .patch = flags.integer(prefix + "patch"),
                           .dim = flags.integer(prefix + "dim"),
                           .depth = flags.integer(prefix + "depth"),
                           .heads = flags.integer(prefix + "heads"),
                           .classes = 10};
  if (config.patch <= 0 || 28 % config.patch != 0)
    flags.fail("--" + prefix + "patch must divide 28");
  if (config.dim <= 0 || config.depth <= 0 || config.heads <= 0 || config.dim % config.heads != 0)
    flags.fail("--" + prefix + "dim, --" + prefix + "depth and --" + prefix +
               "heads must be positive, and the heads must divide the dim");
  return config;
}

} // namespace recipe
