// jit/train/step_stages.hpp — the graph stages a training step's features contribute: in-step
// sifting, mixed precision, data parallel and the update, each built from what it needs
#pragma once
#include "jit/dist/data_parallel.hpp"
#include "jit/pipeline/pipeline.hpp"
#include "jit/runtime/host_tensor.hpp"
#include "jit/train/optimizer.hpp"
#include "jit/train/sift.hpp"

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sinter {

/// Mixed precision of a step (docs/amp.md): off, or the autocast pass with bf16 or fp16 as the
/// low precision. fp16 always scales the loss (UpdateOptions::loss_scaling, default settings
/// unless given); bf16 never does.
enum class AmpMode { off, bf16, fp16 };
std::string_view amp_name(AmpMode mode);
/// "off", "bf16" or "fp16"; throws std::invalid_argument naming the accepted values.
AmpMode amp_from_name(std::string_view name);

/// Traces the user's loss function for a batch of these types.
using StepTracer = std::function<Graph(std::span<const HostTensor> batch)>;

/// A parameter's low-precision working copy under AMP (`state.low.<name>`): what its GEMMs
/// read, written by the update next to the f32 master weight.
struct WorkingCopy {
  std::size_t parameter;
  DType dtype;
  std::string state;
};

/// What the stages know of the step they build: its parameters, batch and ranks.
struct StepGraphFacts {
  const std::vector<std::string>& parameters; ///< names of the trained parameters
  const std::vector<std::string>& batch;      ///< names of the batch inputs, in call order
  int ranks = 1;
};

/// What the traced forward graph of a step is checked against.
struct TracedStepCheck {
  const std::vector<std::string>& parameters;
  std::vector<TensorType> parameter_types;
  std::span<const std::pair<std::string, const HostTensor*>> frozen;
  bool per_row_loss = false; ///< in-step sifting: output 0 is each row's loss
};
/// The `trace` stage: the forward graph for `batch`, checked (checked_trace).
Stage trace_stage(const StepTracer& trace, std::span<const HostTensor> batch,
                  const TracedStepCheck& check, std::vector<std::string>& batch_names);
/// `forward` checked against the parameters, frozen inputs and the batch, with a message
/// naming what differs; the batch inputs' names (every input neither a parameter nor frozen,
/// in call order) go to `batch_names`.
Graph checked_trace(Graph forward, std::span<const HostTensor> batch, const TracedStepCheck& check,
                    std::vector<std::string>& batch_names);

/// In-step sifting's `sift` stage: the traced per-row losses are recorded in the loss history,
/// `rows_trained` rows drawn by the rule (select) or every row kept (delay), and the loss
/// differentiated is their mean; the batch's mean is what the step reports.
Stage sift_stage(const SiftOptions& sift, std::span<const HostTensor> batch,
                 const StepGraphFacts& facts, bool select, int64_t rows_trained,
                 const StepTracer& trace);
/// In-step sifting's `share-taken-rows` stage (after lower): the drawn rows' forward values
/// are read from the batch's.
Stage share_taken_rows_stage();

/// `forward` as a step under `mode` computes it: the autocast pass to bf16 or f16 (off: as it
/// is). value_and_grad over a model uses it to return the gradients such a step applies.
Graph amp_forward(Graph forward, AmpMode mode);
/// Mixed precision's `autocast` stage: amp_forward under `mode`.
Stage autocast_stage(AmpMode mode);
/// fp16 loss scaling's `loss-scale` stage: one more output, `amp.scaled_loss`, the loss times
/// `state.amp.scale`, which autodiff then differentiates.
Stage loss_scale_stage();
/// The `autodiff` stage of a step: the gradients of the loss (the scaled loss under fp16
/// scaling) with respect to the parameters and the working copies the graph reads.
Stage step_autodiff_stage(const StepGraphFacts& facts, const std::vector<WorkingCopy>& copies);
/// Mixed precision's `merge-gradients` stage: each parameter's gradient plus its working
/// copy's, raised to f32 (what autodiff through the cast would give); the scaled loss dropped.
Stage merge_gradients_stage(const StepGraphFacts& facts, const std::vector<WorkingCopy>& copies);
/// Data parallel's `loss-all-reduce` stage: the reported loss is the mean over the ranks.
Stage loss_all_reduce_stage(int ranks);

/// The `update` stage: the outputs of the step program are the loss, then with `update` the
/// new parameters, optimizer state and working copies (the optimizer appended, gradients
/// reduced across ranks per `layout`), or without it the gradients (accumulation: the update
/// program sums them first); in-step sifting's outputs follow.
Stage update_stage(const StepGraphFacts& facts, const std::vector<WorkingCopy>& copies,
                   const UpdateOptions& update, const DataParallelLayout& layout, bool append);
/// The update program of accumulation: parameters and summed gradients (`grad.<name>`) in,
/// new parameters, optimizer state and working copies out.
Graph update_program(const StepGraphFacts& facts, const std::vector<WorkingCopy>& copies,
                     const std::vector<TensorType>& parameter_types, const UpdateOptions& update,
                     const DataParallelLayout& layout);

/// The graph input or output named `name`; std::logic_error when there is none.
ValueId input_named(const Graph& g, const std::string& name);
ValueId output_named(const Graph& g, const std::string& name);

} // namespace sinter
