// jit/train/optimizer.hpp — the optimizer update as graph ops: SGD, AdamW, global-norm clipping
#pragma once
#include "jit/ir/graph.hpp"
#include "ops/value.hpp"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace sinter {

/// Stochastic gradient descent with optional (Nesterov) momentum and L2 weight decay.
struct SGD {
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
};

/// Adam with decoupled weight decay (Loshchilov & Hutter).
struct AdamW {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

using Optimizer = std::variant<SGD, AdamW>;

/// fp16 dynamic loss scaling (docs/amp.md), all inside the compiled step: the loss is
/// multiplied by the scale before autodiff and the gradients divided by it; an update whose
/// gradients hold an inf or NaN is skipped (parameters and optimizer state unchanged) and the
/// scale multiplied by `backoff`; after `growth_interval` clean updates in a row it is
/// multiplied by `growth`. The scale is runtime state (`state.amp.scale`), never a constant.
struct LossScaling {
  double initial = 65536.0;
  double growth = 2.0;
  double backoff = 0.5;
  int64_t growth_interval = 2000;
};

/// A parameter's own settings (a parameter group's): its weight decay instead of the
/// optimizer's, and a factor on the learning rate.
struct ParameterUpdate {
  double weight_decay = 0.0;
  double lr_scale = 1.0;
};

struct UpdateOptions {
  Optimizer optimizer = AdamW{};
  /// Rescale all gradients together when their global L2 norm exceeds this (0: off).
  double clip_grad_norm = 0.0;
  /// Set: the gradients arrive multiplied by `state.amp.scale` (see LossScaling).
  std::optional<LossScaling> loss_scaling;
  /// Parameters, by name, whose settings differ from the optimizer's (parameter groups); the
  /// others take its weight decay and the plain learning rate.
  std::map<std::string, ParameterUpdate> per_parameter;
};

/// Names of the optimizer's per-parameter state tensors (same shape as the parameter).
std::vector<std::string> state_names(const Optimizer& optimizer);

/// Scalar inputs every update takes, fed each step so no value is baked into the code:
/// `opt.lr`, `opt.grad_scale` (1/k when k micro-batches were summed) and `opt.step` (t, the
/// 1-based update count; AdamW's bias corrections 1 - beta^t are computed from it in the step,
/// less the updates loss scaling skipped).
std::vector<std::string> scalar_names();

/// Step-wide state of loss scaling (scalars, f32), with the values a fresh run starts from:
/// `state.amp.scale`, `state.amp.good_steps` (clean updates since the scale last changed) and
/// `state.amp.skipped` (updates skipped so far).
std::vector<std::pair<std::string, double>> loss_scaling_state(const LossScaling& scaling);

struct UpdatedParameter {
  Value parameter;
  std::vector<Value> state; ///< in state_names() order
};

struct UpdateResult {
  std::vector<UpdatedParameter> parameters;
  /// New values of step-wide state, by the name of the input they replace (`state.amp.*`).
  std::vector<std::pair<std::string, Value>> state;
};

/// Appends the update of every parameter to `g`: creates the scalar and state inputs (reusing
/// one already there by name, such as the loss scale the forward graph read), applies loss
/// unscaling and clipping, and returns the new parameter and state values (callers make them
/// outputs). `grads[i]` is the gradient of `params[i]`; `names[i]` names it (state inputs are
/// `state.<state>.<name>`).
/// With `complete_sum` (ZeRO: each rank holds a shard of every gradient), the step-wide sums
/// over the gradients (the non-finite count of loss scaling, the squared norm of clipping) are
/// passed through it to become sums over every rank's shard.
UpdateResult append_update(Graph& g, const std::vector<std::string>& names,
                           const std::vector<Value>& params, const std::vector<Value>& grads,
                           const UpdateOptions& options,
                           const std::function<Value(Value)>& complete_sum = {});

/// The graph input named `name`, created with `type` if `g` has none yet.
Value input_once(Graph& g, const std::string& name, const TensorType& type);

} // namespace sinter
