// jit/train/optimizer.hpp — the optimizer update as graph ops: SGD, AdamW, global-norm clipping
#pragma once
#include "jit/ir/graph.hpp"
#include "ops/value.hpp"

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

struct UpdateOptions {
  Optimizer optimizer = AdamW{};
  /// Rescale all gradients together when their global L2 norm exceeds this (0: off).
  double clip_grad_norm = 0.0;
};

/// Names of the optimizer's per-parameter state tensors (same shape as the parameter).
std::vector<std::string> state_names(const Optimizer& optimizer);

/// Scalar inputs every update takes, fed each step so no value is baked into the code:
/// `opt.lr`, `opt.grad_scale` (1/k when k micro-batches were summed), and for AdamW
/// `opt.bias1`, `opt.bias2` (1 - beta^t).
std::vector<std::string> scalar_names(const Optimizer& optimizer);

struct UpdatedParameter {
  Value parameter;
  std::vector<Value> state; ///< in state_names() order
};

/// Appends the update of every parameter to `g`: creates the scalar and state inputs, applies
/// clipping, and returns the new parameter and state values (callers make them outputs).
/// `grads[i]` is the gradient of `params[i]`; `names[i]` names it (state inputs are
/// `state.<state>.<name>`).
std::vector<UpdatedParameter> append_update(Graph& g, const std::vector<std::string>& names,
                                            const std::vector<Value>& params,
                                            const std::vector<Value>& grads,
                                            const UpdateOptions& options);

} // namespace sinter
