// jit/train/step_state.hpp — what a training step keeps between calls besides the parameters:
// optimizer state, loss scaling, in-step sifting's history and counters, AMP working copies
#pragma once
#include "jit/runtime/host_tensor.hpp"
#include "jit/train/optimizer.hpp"
#include "jit/train/sift.hpp"
#include "jit/train/step_stages.hpp"

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sinter {

/// In-step sifting's counts (TrainStep::sift_counts).
struct SiftCounts {
  int64_t seen = 0;      ///< rows scored (on this rank)
  int64_t kept = 0;      ///< rows backpropagated
  bool delaying = false; ///< the next call falls in the delay (every row trained on)
  double kept_fraction() const {
    return seen ? static_cast<double>(kept) / static_cast<double>(seen) : 0.0;
  }
};

/// The tensors a step carries from call to call, by name (`state.*`, step_roles.hpp), and what
/// the step asks of them.
class StepState {
public:
  /// Zeroed optimizer state for every parameter (under ZeRO, `pieces` > 1: this rank's shard
  /// of each), loss scaling's start values, sifting's empty history.
  StepState(const std::vector<std::string>& names, std::span<HostTensor* const> parameters,
            const UpdateOptions& update, const std::optional<SiftOptions>& sift, int pieces);

  std::map<std::string, HostTensor>& tensors() { return tensors_; }
  const std::map<std::string, HostTensor>& tensors() const { return tensors_; }
  /// What checkpoints keep: everything but the working copies (made from the parameters).
  std::vector<std::pair<std::string, HostTensor*>> checkpointed();
  /// The whole shape of `name` (a parameter's state: the parameter's, even when sharded).
  Shape whole_shape(const std::string& name) const;

  /// Loss scaling: updates skipped, the current scale (0 without scaling).
  int64_t skipped_updates() const;
  double loss_scale() const;

  /// The `working-copies` stage: casts of a parameter to bf16/f16 become reads of its working
  /// copy, made here on first sight.
  Stage working_copies_stage();
  const std::vector<WorkingCopy>& working_copies() const { return copies_; }
  /// Makes again the copies of parameters the caller replaced or edited since the step last
  /// wrote them (HostTensor::stamp).
  void refresh_working_copies();
  /// The step just wrote the parameters (and their copies).
  void note_parameters_written();

  /// In-step sifting: whether this call falls in the delay, a new epoch, the counts.
  bool sift_delaying() const;
  void start_sift_epoch();
  SiftCounts sift_counts() const;
  /// Fills `draws` with this call's uniform draws, one per row of `rows` (rank r takes the
  /// draws after ranks 0..r-1, so they never depend on the delay).
  void draw(HostTensor& draws, int64_t rows, int rank) const;
  /// Counts a call that scored `rows` rows on this rank (of `ranks`) and trained on `kept`.
  void count_sifted(int64_t rows, int64_t kept, int ranks);

private:
  const std::vector<std::string>& names_;
  std::span<HostTensor* const> parameters_;
  const UpdateOptions& update_;
  const std::optional<SiftOptions>& sift_;
  std::map<std::string, HostTensor> tensors_;
  std::vector<WorkingCopy> copies_;
  /// Each parameter's stamp after the step last wrote it: a different stamp means the caller
  /// replaced or edited it, and its working copy is made again.
  std::vector<uint64_t> parameter_stamps_;
};

} // namespace sinter
