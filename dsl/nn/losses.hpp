// dsl/nn/losses.hpp — losses with per-sample (unreduced) and mean forms: cross-entropy with
// label smoothing and ignore_index, mean squared error, knowledge and feature distillation
#pragma once
#include "dsl/tensor.hpp"
#include "ops/padding.hpp"

#include <cmath>

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
  // Shape buckets: padded positions are ignored like ignore_index labels.
  if (Value real = padding_mask(y)) ignored = where(real, ignored, ones_like(ignored));
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

/// The index (i32) of the largest element along `axis` (the first of equal ones), e.g. a
/// classifier's prediction: argmax(logits).
inline Var argmax(const Var& x, int64_t axis = -1, bool keepdims = false) {
  return Var(sinter::argmax(x.value(), axis, keepdims));
}

/// The share (f32 scalar) of rows whose argmax over the last axis of `logits` equals `labels`:
/// a metric to return beside the loss (compile_eval), never to train on (no gradient).
inline Var accuracy(const Var& logits, const Var& labels) {
  return Var(sinter::accuracy(logits.value(), labels.value()));
}

/// Mean squared error: per sample (mean over all but the first dim) [N], or the overall mean.
inline Var mse_loss(const Var& prediction, const Var& target,
                    Reduction reduction = Reduction::mean) {
  Value diff = prediction.value() - target.value();
  Value squared = diff * diff;
  // Shape buckets: padded positions count in neither form (padded_mean is mean otherwise).
  if (reduction == Reduction::mean) return Var(padded_mean(squared));
  std::vector<int64_t> feature_axes;
  for (int64_t d = 1; d < squared.rank(); ++d)
    feature_axes.push_back(d);
  return Var(feature_axes.empty() ? squared : padded_mean(squared, feature_axes));
}

struct KdOptions {
  /// Softens both distributions: softmax(logits / temperature). Hinton et al. use 1–4.
  double temperature = 1.0;
  /// Weight of the distillation term; 1 − alpha weighs the label cross-entropy.
  double alpha = 0.5;
  /// Label smoothing and ignore_index of the cross-entropy term.
  CrossEntropyOptions cross_entropy = {};
};

/// Knowledge distillation (Hinton et al. 2015):
///   alpha · T² · KL(softmax(teacher / T) ‖ softmax(student / T)) + (1 − alpha) · CE(student,
///   labels)
/// with logits [N..., C] and labels [N...]. No gradient flows into the teacher's logits. Per
/// sample [N...] with Reduction::none (a sample with ignore_index keeps its KL term); else the
/// KL term's mean over all samples (PyTorch's `batchmean`) plus the cross-entropy's mean over the
/// samples that count. T² keeps the gradient's scale independent of T.
inline Var kd_loss(const Var& student_logits, const Var& teacher_logits, const Var& labels,
                   KdOptions options = {}, Reduction reduction = Reduction::mean) {
  Value s = student_logits.value(), t = teacher_logits.value();
  if (s.type().shape != t.type().shape)
    throw std::invalid_argument("sinter: kd_loss needs student and teacher logits of one shape, "
                                "got " +
                                to_string(s.type()) + " and " + to_string(t.type()) +
                                " — both models must predict the same classes");
  if (s.rank() < 1)
    throw std::invalid_argument("sinter: kd_loss needs logits [N..., C], got a scalar");
  if (!(options.temperature > 0.0) || !std::isfinite(options.temperature))
    throw std::invalid_argument("sinter: kd_loss temperature must be a positive number, got " +
                                std::to_string(options.temperature));
  if (!(options.alpha >= 0.0 && options.alpha <= 1.0))
    throw std::invalid_argument("sinter: kd_loss alpha must be in [0, 1], got " +
                                std::to_string(options.alpha));
  // The teacher's type may differ (a bf16 teacher under AMP): compare in the student's.
  if (t.type().dtype != s.type().dtype) t = cast(t, s.type().dtype);
  double temperature = options.temperature;
  Value log_student = log_softmax(s / temperature, -1);
  Value log_teacher = log_softmax(stop_gradient(t) / temperature, -1);
  Value kl = sum(exp(log_teacher) * (log_teacher - log_student), {-1}); // [N...]
  double distill = options.alpha * temperature * temperature, hard = 1.0 - options.alpha;
  Var ce = cross_entropy_loss(student_logits, labels, options.cross_entropy, reduction);
  if (reduction == Reduction::none) {
    Value per_sample = kl * distill + ce.value() * hard;
    // Shape buckets: a padded position's loss is 0, as cross_entropy_loss's is.
    if (Value real = padding_mask(per_sample)) per_sample = where(real, per_sample, 0.0);
    return Var(per_sample);
  }
  return Var(padded_mean(kl) * distill + ce.value() * hard);
}

/// Feature distillation: the mean squared error between a student's hidden state and the
/// teacher's (no gradient into the teacher's). When their widths differ, pass the student's
/// state through a learned projection first, e.g. a `Linear(student_dim, teacher_dim)` trained
/// with the student. Per sample [N] with Reduction::none.
inline Var feature_distillation_loss(const Var& student_hidden, const Var& teacher_hidden,
                                     Reduction reduction = Reduction::mean) {
  Value s = student_hidden.value(), t = teacher_hidden.value();
  if (s.type().shape != t.type().shape)
    throw std::invalid_argument(
        "sinter: feature_distillation_loss needs hidden states of one shape, got " +
        to_string(s.type()) + " (student) and " + to_string(t.type()) +
        " (teacher) — project the student's state to the teacher's width first, e.g. with a "
        "Linear layer");
  if (t.type().dtype != s.type().dtype) t = cast(t, s.type().dtype);
  return mse_loss(student_hidden, Var(stop_gradient(t)), reduction);
}

/// Shape buckets (StepOptions::buckets, docs/profiling.md): a bool mask broadcastable to x,
/// true at its real positions, when x is padded (dim 0 the batch, dim 1 the bucketed extent);
/// an empty Var otherwise. For reductions of your own across the padded dim.
inline Var padding_mask(const Var& x) {
  Value mask = padding_mask(x.value());
  return mask ? Var(mask) : Var();
}

/// The mean of x over `axes` (empty: all) counting only its real positions under shape buckets,
/// the plain mean otherwise: what the losses above use.
inline Var padded_mean(const Var& x, std::vector<int64_t> axes = {}) {
  return Var(padded_mean(x.value(), std::move(axes)));
}

} // namespace sinter
