// recipes/fashion_mlp.hpp — the Fashion-MNIST MLP (mlp recipe and the training-step benchmark)
#pragma once
#include "dsl/sinter.hpp"

#include <cstdint>
#include <vector>

namespace recipe {

/// Images [B, 28, 28] in [0, 1] → standardised, flattened → MLP → 10 logits.
struct FashionMLP {
  BOOST_HANA_DEFINE_STRUCT(FashionMLP, (sinter::MLP, mlp));

  FashionMLP(const std::vector<int64_t>& widths, sinter::Init& init) : mlp(widths, init) {}
  sinter::Var operator()(const sinter::Var& images) const {
    sinter::Value x = images.value();
    int64_t batch = x.shape()[0];
    // Fashion-MNIST's pixel mean and standard deviation.
    sinter::Value flat = reshape((x - 0.2860) * (1.0 / 0.3530), {batch, 784});
    return mlp(sinter::Var(flat));
  }
};

} // namespace recipe
