// jit/train/train_step.hpp — a whole training step (forward, backward, update) as one program
#pragma once
#include "jit/pipeline/pipeline.hpp"
#include "jit/runtime/host_tensor.hpp"
#include "jit/runtime/interrupt.hpp" // Interrupted, thrown by a step
#include "jit/runtime/memory_plan.hpp"
#include "jit/train/max_batch.hpp"
#include "jit/train/optimizer.hpp"
#include "jit/train/sift.hpp"
#include "jit/train/step_stages.hpp"
#include "jit/train/step_state.hpp"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sinter {

class CompiledGraph;
class Communicator;
class Context;
struct StepProgram;

struct TrainStepOptions {
  UpdateOptions update;
  /// Micro-batches whose gradients are summed before one update (1: update every call).
  int64_t accumulate = 1;
  AmpMode amp = AmpMode::off;
  /// Inputs the step reads but never differentiates or updates, by graph input name: a
  /// distillation teacher's weights. They must outlive the step; on a GPU they stay resident
  /// and go up again only when the host changes them.
  std::vector<std::pair<std::string, const HostTensor*>> frozen;
  /// Data parallel (docs/distributed.md): the ranks this step averages its gradients over
  /// before each update. nullptr: the job's (sinter::world(); a process launched alone is a
  /// world of one). Each rank passes its own shard of the global batch; parameters stay
  /// identical on every rank.
  Communicator* communicator = nullptr;
  /// Data parallel with several ranks: ZeRO stage (docs/distributed.md). 0 keeps the whole
  /// optimizer state on every rank; 1 keeps 1/ranks of each parameter's state per rank (each
  /// rank updates its shard, then the parameters are all-gathered); 2 also reduce-scatters the
  /// gradients instead of all-reducing them. No effect in a world of one.
  int zero = 0;
  /// Data parallel: gradients are reduced in buckets of about this many bytes, each started
  /// as soon as the backward pass has produced it (the first holds at most 1 MiB).
  int64_t bucket_bytes = int64_t{25} << 20;
  /// Data parallel: every this many updates the ranks compare checksums of their parameters,
  /// and a difference stops every rank naming the parameter (0: only at the first call).
  int64_t check_every = 0;
  /// In-step sifting (docs/sifting.md): output 0 of the traced graph is then each row's loss
  /// ([batch], the user's loss with Reduction::none). The step scores every row with it, draws
  /// `sift_rows` of them by the rule inside the compiled program, and backpropagates the mean
  /// loss of those rows alone; the batch's forward values are reused for them.
  std::optional<SiftOptions> sift;
  /// In-step sifting: rows each update trains on (0: round(batch / (1 + beta)), at least 1).
  int64_t sift_rows = 0;
  /// cuda: the batch stays on the device like a frozen input: one buffer, uploaded only when a
  /// call passes a tensor whose value changed (another tensor, or one written since:
  /// HostTensor::stamp). For a loop that trains on one batch again and again (a benchmark, an
  /// overfitting check), as PyTorch code that keeps its batch on the GPU does; with a new batch
  /// every call it only moves the upload from the copy stream onto the step's own stream.
  bool resident_batch = false;
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
  /// The ranks the step averages over (its TrainStepOptions::communicator, or world()).
  Communicator& communicator() const { return *options_.communicator; }
  /// Into how many pieces each parameter's optimizer state is split: the number of ranks
  /// under ZeRO (zero > 0, several ranks), else 1. This rank holds piece communicator().rank()
  /// of each: the flattened state, zero-padded to pieces × shard elements, cut in pieces.
  int state_pieces() const;
  /// The pieces optimizer-state tensor `name` is split into: state_pieces() for a parameter's
  /// state, 1 for step-wide state (`state.amp.*`), which every rank keeps whole.
  int state_pieces(const std::string& name) const;
  /// The whole shape of optimizer-state tensor `name` (`state.m.<param>`: its parameter's;
  /// step-wide state such as `state.amp.scale`: its own, never split).
  Shape state_shape(const std::string& name) const;
  /// The compiled update program (for its memory plan and kernel counts).
  const CompiledGraph& program() const;
  /// Every program the latest call ran: the step, then with accumulation the update.
  std::vector<const CompiledGraph*> programs() const;
  /// Distinct batch types compiled so far (learning-rate changes never add one; with in-step
  /// sifting each type's delay program is compiled with it).
  std::size_t compilations() const { return by_batch_types_.size(); }

  /// Whether the step sifts in-step (TrainStepOptions::sift).
  bool sifts_in_step() const { return options_.sift.has_value(); }
  /// In-step sifting: a new epoch begins (with SiftOptions::repeat_delay the delay counts again
  /// from here).
  void start_sift_epoch();
  /// In-step sifting: rows scored and trained on so far, and whether the next call delays.
  SiftCounts sift_counts() const;
  /// In-step sifting: the rows of the latest batch its update trained on (i32 [k], in draw
  /// order; the whole batch in the delay). Reading it waits for the step.
  const HostTensor& sift_rows() const;

  /// The whole step for a batch of these types (dtypes and shapes; the values are not read),
  /// built and optimised as it would be compiled but without generating code: what
  /// plan_memory() and max-batch searches use.
  Graph plan_graph(std::span<const HostTensor> batch);
  /// Plans the step for a batch of these types at another shape bucket (nothing compiled) and
  /// hands the plan to the backend (BackendEntry::remember_shapes), so that the next compile
  /// makes kernels that serve both buckets. Nothing happens on backends without that, with
  /// SINTER_ROWS_PARAMETER=0, or when the step cannot be planned at that size.
  void remember_other_shape(std::span<const HostTensor> batch);
  /// Bytes of the tensors the step keeps between calls, by kind (host memory on the CPU,
  /// device memory on a GPU): parameters, optimizer state (AMP working copies included) and
  /// frozen inputs.
  struct ResidentBytes {
    int64_t parameters = 0, optimizer_state = 0, frozen = 0;
  };
  ResidentBytes resident_bytes() const;
  /// The memory the step needs for a batch of these types on the default device (arena,
  /// outputs, parameters, optimizer state, frozen inputs, batch staging), planned without
  /// compiling.
  StepMemory plan_memory(std::span<const HostTensor> batch);
  /// The largest batch whose planned peak fits `budget_bytes`: `example` is one batch, and
  /// dim 0 of every batch input is the batch size. peak_bytes <= budget_bytes < next_peak_bytes
  /// always holds (batch 0 when even one example does not fit).
  MaxBatch max_batch(std::span<const HostTensor> example, int64_t budget_bytes);

private:
  struct Compiled;
  const Compiled& compiled_for(std::span<const HostTensor> batch);
  /// The step graphs for a batch after its feature stages (traced, autocast, differentiated,
  /// with the update): `step`, `later` (the stages CompiledGraph runs next), and with
  /// accumulation `apply`. Checks the batch against the trace.
  struct Built {
    Graph step, apply;
    Pipeline later;
    std::vector<std::string> batch_names;
  };
  /// In-step sifting builds two steps per batch type: `select` draws rows and trains on them;
  /// `delay` trains on the whole batch (SiftOptions::delay). Both record the losses.
  enum class Sifting { none, select, delay };
  Built build(std::span<const HostTensor> batch, Sifting sifting, CompileRun& run);
  Graph plan_graph(std::span<const HostTensor> batch, CompileRun& run);
  /// Rows a sifting update trains on for a batch of `rows` rows.
  int64_t sift_rows_for(int64_t rows) const;
  StepMemory plan_for(const Graph& optimized, const std::vector<std::string>& batch_names,
                      CompileRun& run) const;
  /// Throws OutOfMemory saying what the step planned, what was free, its largest buffers and
  /// the largest batch that fits `available`.
  [[noreturn]] void explain_out_of_memory(std::span<const HostTensor> batch,
                                          const StepMemory& planned, int64_t available,
                                          const std::string& cause);
  static std::string batch_key(std::span<const HostTensor> batch);
  /// Whether gradients leave the step program for the host before the update program
  /// (accumulation: summed over micro-batches there).
  bool split_update() const;
  /// The number of ranks the step averages over (1 in a world of one).
  int ranks() const;
  std::vector<HostTensor> scalar_inputs(double lr) const;
  /// After an update: the parameters' stamps, the count, the ranks' periodic agreement check.
  void finish_update();

  Tracer trace_;
  std::vector<std::string> names_;
  std::vector<HostTensor*> parameters_;
  TrainStepOptions options_;
  Context* context_;
  std::vector<std::string> frozen_names_;
  std::unique_ptr<StepState> state_;
  std::map<std::string, std::unique_ptr<Compiled>> by_batch_types_;
  const Compiled* last_ = nullptr;
  std::vector<HostTensor> grad_sums_;           ///< accumulation only
  HostTensor rank_;                             ///< dist.rank: this process's rank (ZeRO shards)
  HostTensor sift_uniforms_;                    ///< sift.uniforms: this call's draws, one per row
  std::shared_ptr<const HostTensor> sift_rows_; ///< the latest selection
  std::shared_ptr<const HostTensor> every_row_; ///< 0..B-1: what the delay trains on
  int64_t micro_steps_ = 0;
  int64_t steps_ = 0;
};

} // namespace sinter
