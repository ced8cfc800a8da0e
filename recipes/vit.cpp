// recipes/vit.cpp — a small vision transformer trained on Fashion-MNIST
#include "fashion_training.hpp"
#include "fashion_vit.hpp"

using namespace sinter;
using recipe::FashionViT;

int main(int argc, char** argv) {
  recipe::Flags flags(
      "vit", "Trains a vision transformer on Fashion-MNIST (CPU or GPU) and reports test accuracy.",
      recipe::fashion_flags({{"epochs", "12"}, {"lr", "0.003"}, {"weight-decay", "0.05"}},
                            {{"patch", "7", "patch size (divides 28)"},
                             {"dim", "64", "token width"},
                             {"depth", "4", "transformer blocks"},
                             {"heads", "4", "attention heads (divide --dim)"}}),
      argc, argv);
  recipe::apply_runtime_flags(flags);
  return recipe::run("vit", [&] {
    Init init(static_cast<uint64_t>(flags.integer("seed")));
    FashionViT model(recipe::vit_config(flags), init);
    return recipe::train_fashion("vit", flags, model);
  });
}
