// recipes/fashion_vit.hpp — the Fashion-MNIST ViT (vit recipe, distill's teacher and student)
#pragma once
#include "dsl/sinter.hpp"

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

} // namespace recipe
