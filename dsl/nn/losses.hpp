// dsl/nn/losses.hpp — losses with per-sample (unreduced) and mean forms: cross-entropy with
// label smoothing and ignore_index, mean squared error
#pragma once
#include "dsl/tensor.hpp"

namespace sinter {

enum class Reduction {
  none, ///< one loss per sample (needed by smart sifting and custom weighting)
  mean, ///< the mean over the samples that count
};

struct CrossEntropyOptions {
  /// Mixes the one-hot target with the uniform distribution: target = (1-ε)·onehot + ε/C.
  double label_smoothing = 0.0;
  /// Samples with this label contribute 0 and do not count in the mean (PyTorch's -100).
  int64_t ignore_index = -100;
};

/// Softmax cross-entropy of logits [N..., C] against integer labels [N...]: per sample [N...]
/// with Reduction::none, else the mean over samples whose label is not ignore_index.
inline Var cross_entropy_loss(const Var& logits, const Var& labels,
                              CrossEntropyOptions options = {},
                              Reduction reduction = Reduction::mean) {
  Value z = logits.value(), y = labels.value();
  if (!(options.label_smoothing >= 0.0 && options.label_smoothing < 1.0))
    throw std::invalid_argument("sinter: label_smoothing must be in [0, 1), got " +
                                std::to_string(options.label_smoothing));
  Value ignored = equal(y, scalar_like(y, static_cast<double>(options.ignore_index)));
  // Ignored labels are replaced by class 0 for the arithmetic, then masked out.
  Value safe_labels = where(ignored, scalar_like(y, 0.0), y);
  Value nll = cross_entropy(z, safe_labels); // logsumexp - picked logit
  Value per_sample = nll;
  if (options.label_smoothing > 0.0) {
    double eps = options.label_smoothing;
    Value uniform = logsumexp(z, {-1}) - mean(z, {-1}); // cross-entropy against uniform targets
    per_sample = nll * (1.0 - eps) + uniform * eps;
  }
  per_sample = where(ignored, scalar_like(per_sample, 0.0), per_sample);
  if (reduction == Reduction::none) return Var(per_sample);
  Value counted = sum(where(ignored, scalar_like(per_sample, 0.0), scalar_like(per_sample, 1.0)));
  return Var(sum(per_sample) / maximum(counted, scalar_like(counted, 1.0)));
}

/// Mean squared error: per sample (mean over all but the first dim) [N], or the overall mean.
inline Var mse_loss(const Var& prediction, const Var& target,
                    Reduction reduction = Reduction::mean) {
  Value diff = prediction.value() - target.value();
  Value squared = diff * diff;
  if (reduction == Reduction::mean) return Var(mean(squared));
  std::vector<int64_t> feature_axes;
  for (int64_t d = 1; d < squared.rank(); ++d)
    feature_axes.push_back(d);
  return Var(feature_axes.empty() ? squared : mean(squared, feature_axes));
}

} // namespace sinter
