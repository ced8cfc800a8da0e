// jit/train/train_step.hpp — a whole training step (forward, backward, update) as one program
#pragma once
#include "jit/runtime/host_tensor.hpp"
#include "jit/train/optimizer.hpp"

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sinter {

class CompiledGraph;
class Context;

/// Mixed precision of a step (docs/amp.md): off, or the autocast pass with bf16 or fp16 as the
/// low precision. fp16 always scales the loss (UpdateOptions::loss_scaling, default settings
/// unless given); bf16 never does.
enum class AmpMode { off, bf16, fp16 };
std::string_view amp_name(AmpMode mode);
/// "off", "bf16" or "fp16"; throws std::invalid_argument naming the accepted values.
AmpMode amp_from_name(std::string_view name);

struct TrainStepOptions {
  UpdateOptions update;
  /// Micro-batches whose gradients are summed before one update (1: update every call).
  int64_t accumulate = 1;
  AmpMode amp = AmpMode::off;
};

/// The loss of one step. It is computed by the step itself: reading it costs nothing more and
/// never changes or reruns the compiled program.
class LossHandle {
public:
  LossHandle() = default;
  explicit LossHandle(std::shared_ptr<const HostTensor> loss) : loss_(std::move(loss)) {}
  double value() const { return loss_ ? loss_->at(0) : 0.0; }
  const HostTensor& tensor() const { return *loss_; }

private:
  std::shared_ptr<const HostTensor> loss_;
};

class TrainStep {
public:
  /// Builds the forward graph for a batch: inputs named `names` are the parameters, the others
  /// the batch (in call order); output 0 is the scalar loss. Called once per new batch type.
  using Tracer = std::function<Graph(std::span<const HostTensor> batch)>;

  /// The step updates `*parameters[i]` (they must outlive the step) and owns the optimizer
  /// state, shared by every batch shape it is compiled for.
  TrainStep(Tracer trace, std::vector<std::string> names, std::vector<HostTensor*> parameters,
            TrainStepOptions options, Context* context = nullptr);
  ~TrainStep();

  /// One micro-batch: `batch` follows the forward graph's batch inputs. Applies the update on
  /// every `accumulate`-th call, with learning rate `lr` (a runtime input: no recompile).
  LossHandle operator()(std::span<const HostTensor> batch, double lr);

  /// Optimizer updates done so far, skipped ones included (AdamW's bias correction counts only
  /// the applied ones; see skipped_updates).
  int64_t steps() const { return steps_; }
  /// Updates fp16 loss scaling skipped for overflowing gradients (0 without scaling). Reading
  /// it waits for the latest step.
  int64_t skipped_updates() const;
  /// The current fp16 loss scale (0 without scaling). Reading it waits for the latest step.
  double loss_scale() const;
  void set_steps(int64_t steps) { steps_ = steps; }
  /// Optimizer state tensors by name (`state.m.<param>`, ...), for checkpoints (the AMP
  /// working copies are derived from the parameters and left out).
  std::vector<std::pair<std::string, HostTensor*>> state();
  const std::vector<std::string>& parameter_names() const { return names_; }
  /// The compiled update program (for its memory plan and kernel counts).
  const CompiledGraph& program() const;
  /// Every program the latest call ran: the step, then with accumulation the update.
  std::vector<const CompiledGraph*> programs() const;
  /// Distinct batch types compiled so far (learning-rate changes never add one).
  std::size_t compilations() const { return by_batch_types_.size(); }

private:
  struct Compiled;
  /// A parameter's low-precision working copy under AMP (`state.low.<name>`): what its GEMMs
  /// read, written by the update kernel next to the f32 master weight, so no step has a
  /// kernel that only casts weights.
  struct LowCopy {
    std::size_t parameter;
    DType dtype;
    std::string state;
  };
  const Compiled& compiled_for(std::span<const HostTensor> batch);
  static std::string batch_key(std::span<const HostTensor> batch);
  Graph read_low_copies(const Graph& forward);
  void refresh_low_copies();
  std::vector<HostTensor> scalar_inputs(double lr) const;

  Tracer trace_;
  std::vector<std::string> names_;
  std::vector<HostTensor*> parameters_;
  TrainStepOptions options_;
  Context* context_;
  std::map<std::string, HostTensor> state_;
  std::map<std::string, std::unique_ptr<Compiled>> by_batch_types_;
  const Compiled* last_ = nullptr;
  std::vector<HostTensor> grad_sums_; ///< accumulation only
  std::vector<LowCopy> low_copies_;
  /// Each parameter's stamp after the step last wrote it: a different stamp means the caller
  /// replaced or edited it, and its working copy is made again.
  std::vector<uint64_t> parameter_stamps_;
  int64_t micro_steps_ = 0;
  int64_t steps_ = 0;
};

} // namespace sinter
