// jit/train/sift.hpp — smart sifting: the rule that keeps a sample with probability
// percentile(loss among the last H losses)^beta, and a loader that hands a step only kept
// samples, in full batches (docs/sifting.md)
#pragma once
#include "jit/data/loader.hpp"
#include "jit/runtime/host_tensor.hpp"
#include "ops/value.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sinter {

/// The rule's knobs (Selective-Backprop; SageMaker smart sifting's names in brackets).
struct SiftOptions {
  /// Keep probability = percentile^beta [beta_value]: on average 1 / (1 + beta) of the samples
  /// are kept (beta 1: half, 2: a third, 3: a quarter).
  double beta = 1.0;
  /// The percentile is taken among the last this many losses [loss_history_length].
  int64_t history = 500;
  /// Batches of plain training first (every sample kept, losses still recorded) [sift_delay]:
  /// random weights give meaningless losses.
  int64_t delay = 0;
  /// Count the delay again from the start of every epoch.
  bool repeat_delay = false;
  /// Seeds the draws: the same seed and losses select the same samples.
  uint64_t seed = 0;
};

/// Throws std::invalid_argument for beta < 0 (or not a number), history < 1 or delay < 0.
void check_sift_options(const SiftOptions& options);

/// The rule, deterministic and resumable. Each scored sample's percentile is the share of the
/// recorded losses below it (ties count half; an empty history gives 1); it is kept when a
/// uniform draw u (a counter-based generator seeded by `seed`) is below percentile^beta. Every
/// scored loss, kept or not, then joins the history.
class SiftRule {
public:
  /// Throws std::invalid_argument for beta < 0, history < 1 or delay < 0.
  explicit SiftRule(SiftOptions options);

  const SiftOptions& options() const { return options_; }
  /// A new epoch begins (with repeat_delay the delay counts again from here).
  void start_epoch(int64_t epoch);
  /// Whether the next batch falls in the delay: every sample kept.
  bool delaying() const;
  /// Percentile of `loss` among the recorded losses, in [0, 1].
  double percentile(double loss) const;
  /// Scores one batch: for each loss whether it is kept (`real[i]` false: a padding row, never
  /// kept nor recorded). Records the losses and counts the batch.
  std::vector<bool> select(std::span<const double> losses, std::span<const bool> real = {});

  int64_t seen() const { return seen_; }
  int64_t kept() const { return kept_; }
  double kept_fraction() const {
    return seen_ ? static_cast<double>(kept_) / static_cast<double>(seen_) : 0.0;
  }

  /// The rule's state for a checkpoint, as tensors named `sift.*` (history, counters, draws):
  /// restore() with them continues exactly.
  std::vector<std::pair<std::string, HostTensor>> state() const;
  /// Throws std::runtime_error naming a missing or malformed `sift.*` tensor.
  void restore(const std::map<std::string, HostTensor>& tensors);

private:
  double draw();

  SiftOptions options_;
  std::vector<double> history_; ///< a ring of up to options_.history losses
  int64_t next_slot_ = 0;       ///< where the ring writes next
  int64_t draws_ = 0;
  int64_t batches_ = 0;       ///< scored since the start
  int64_t epoch_batches_ = 0; ///< scored since the epoch began
  int64_t seen_ = 0, kept_ = 0;
};

/// The rule's counter-based generator as in-step sifting feeds it: draw `n` under `seed`, a
/// float in (0, 1) (23 random bits, never 0 or 1).
float sift_uniform(uint64_t seed, uint64_t n);

/// In-step sifting's selection as graph ops (no host round trip). Each of `losses` ([B] f32)
/// gets its percentile among the first `filled` (f32 scalar) entries of `history` ([H] f32;
/// ties count half; 1 while it is empty) and the weight percentile^beta; then k rows are drawn
/// without replacement with those weights (Efraimidis–Spirakis: the k largest keys
/// log(u) / weight, with `uniforms` [B] f32 in (0, 1); equal keys go to the lower row). Returns
/// the rows' indices, i32 [k], largest key first.
Value sift_selection(Value losses, Value history, Value filled, Value uniforms, double beta,
                     int64_t k);

/// Per-sample losses of a batch's rows ([rows] f32 or f64): the user's loss with
/// Reduction::none, compiled (compile_eval), on the batch's examples and labels.
using PerSampleLoss = std::function<HostTensor(const data::Batch& batch)>;

/// Loader mode: wraps a DataLoader, scores each of its batches with `loss`, keeps samples by
/// the rule, and hands out full batches of kept samples with the inner loader's shapes (so the
/// step never recompiles). Kept samples left over at an epoch's end open the next epoch's first
/// batch. The inner loader must not pad (drop_last) and must outlive this one.
class SiftingLoader {
public:
  SiftingLoader(data::DataLoader& inner, PerSampleLoss loss, SiftOptions options);

  /// The next full batch of kept samples; false when the inner epoch is over (call
  /// start_epoch to go on).
  bool next(data::Batch& out);
  void start_epoch(int64_t epoch);
  /// The inner loader's position (resume: seek it, then restore the state).
  data::DataLoader::Position position() const { return inner_.position(); }
  void seek(data::DataLoader::Position position) { inner_.seek(position); }
  const SiftRule& rule() const { return rule_; }
  /// Samples handed out so far (what the step backpropagates).
  int64_t delivered() const { return delivered_; }
  /// The rule's state and the kept samples waiting for a batch (`sift.pending.*`).
  std::vector<std::pair<std::string, HostTensor>> state() const;
  void restore(const std::map<std::string, HostTensor>& tensors);

private:
  void append_rows(const HostTensor& from, int64_t row, std::vector<std::byte>& to) const;
  /// Pending samples restored from a checkpoint must be rows of this loader's batches: checked
  /// at the first batch, the first time their types are known.
  void check_restored_rows();
  struct RestoredRows {
    DType examples;
    Shape examples_shape;
    DType labels;
    Shape labels_shape;
  };

  data::DataLoader& inner_;
  PerSampleLoss loss_;
  SiftRule rule_;
  data::Batch scored_;
  int64_t rows_ = 0; ///< batch rows
  std::vector<std::byte> pending_examples_, pending_labels_;
  int64_t pending_rows_ = 0;
  int64_t delivered_ = 0;
  std::optional<RestoredRows> restored_rows_;
};

} // namespace sinter
