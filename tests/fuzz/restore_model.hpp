// tests/fuzz/restore_model.hpp — the small model, step and sifting loader whose checkpoints the
// restore target reads, shared with the program that writes its seed checkpoints
#pragma once
#include "dsl/sinter.hpp"

#include <memory>

namespace sinter::fuzz {

/// A 6-8-3 MLP trained by AdamW for one step on Gaussian blobs, with a sifting loader over the
/// same blobs scored by the model's per-sample loss: every tensor a recipe's checkpoint holds.
struct RestoreModel {
  static constexpr auto loss = [](MLP& m, Var x, Var y) { return cross_entropy_mean(m(x), y); };
  static constexpr auto per_sample = [](MLP& m, Var x, Var y) -> Var {
    return cross_entropy_loss(m(x), y, {}, Reduction::none);
  };
  static constexpr data::LoaderOptions loader_options{
      .batch_size = 8, .seed = 2, .prefetch_threads = 0};

  std::unique_ptr<data::Dataset> blobs = data::gaussian_blobs(64, 6, 3, 5);
  Init init{7};
  MLP model{{6, 8, 3}, init};
  decltype(compile_step(model, loss, adamw{.lr = 0.01})) step =
      compile_step(model, loss, adamw{.lr = 0.01});
  decltype(compile_eval(model, per_sample, {"examples", "labels"})) score =
      compile_eval(model, per_sample, {"examples", "labels"});

  RestoreModel() {
    data::DataLoader loader(*blobs, loader_options);
    data::Batch batch;
    loader.next(batch);
    step(batch.examples, batch.labels);
  }
  /// A sifting loader (beta 1, history 16) over the blobs, scored by the model.
  std::unique_ptr<SiftingLoader> sifting(data::DataLoader& inner) {
    return std::make_unique<SiftingLoader>(
        inner, [this](const data::Batch& b) { return score(b.examples, b.labels); },
        SiftOptions{.beta = 1.0, .history = 16, .seed = 3});
  }
};

} // namespace sinter::fuzz
