// jit/train/optimizer.cpp — SGD/AdamW updates and gradient clipping built from ops
#include "jit/train/optimizer.hpp"
#include "jit/train/step_roles.hpp"

#include <cmath>
#include <stdexcept>
#include <variant>

namespace sinter {

std::vector<std::string> state_names(const Optimizer& optimizer) {
  if (std::holds_alternative<AdamW>(optimizer)) return {"m", "v"};
  return std::get<SGD>(optimizer).momentum != 0.0 ? std::vector<std::string>{"momentum"}
                                                  : std::vector<std::string>{};
}

std::vector<std::string> scalar_names() { return {"opt.lr", "opt.grad_scale", "opt.step"}; }

std::vector<std::pair<std::string, double>> loss_scaling_state(const LossScaling& scaling) {
  return {{step_names::loss_scale, scaling.initial},
          {step_names::loss_scale_good_steps, 0.0},
          {step_names::loss_scale_skipped, 0.0}};
}

Value input_once(Graph& g, const std::string& name, const TensorType& type) {
  for (const NamedValue& in : g.inputs())
    if (in.name == name) {
      if (g.type(in.id) != type)
        throw std::logic_error("sinter: input " + name + " is " + to_string(g.type(in.id)) +
                               ", expected " + to_string(type));
      return Value{&g, in.id};
    }
  return input(g, name, type);
}

UpdateResult append_update(Graph& g, const std::vector<std::string>& names,
                           const std::vector<Value>& params, const std::vector<Value>& grads,
                           const UpdateOptions& options,
                           const std::function<Value(Value)>& complete_sum) {
  if (names.size() != params.size() || params.size() != grads.size())
    throw std::invalid_argument("sinter: append_update needs one name and gradient per parameter");
  const TensorType f64_scalar{DType::f64, {}}, f32_scalar{DType::f32, {}};
  ScopeGuard in_optimizer(g, "optimizer"); // kernel names: sinter_optimizer_<param>_...
  Value lr = input_once(g, "opt.lr", f64_scalar);
  Value grad_scale = input_once(g, "opt.grad_scale", f64_scalar);
  Value step_count = input_once(g, "opt.step", f64_scalar);

  // Gradients in the parameter's dtype, scaled for accumulation (and unscaled from the loss
  // scale), then clipped by global norm.
  const std::optional<LossScaling>& scaling = options.loss_scaling;
  Value loss_scale, good_steps, skipped, finite;
  if (scaling) {
    loss_scale = input_once(g, step_names::loss_scale, f32_scalar);
    good_steps = input_once(g, step_names::loss_scale_good_steps, f32_scalar);
    skipped = input_once(g, step_names::loss_scale_skipped, f32_scalar);
    grad_scale = grad_scale / cast(loss_scale, DType::f64);
  }
  std::vector<Value> gs;
  for (std::size_t i = 0; i < grads.size(); ++i)
    gs.push_back(grads[i] * cast(grad_scale, grads[i].dtype()));
  if (scaling) {
    // Non-finite gradient elements, counted over every tensor: |g| < inf is false for inf/NaN.
    Value bad;
    for (const Value& grad : gs) {
      Value count = sum(1.0 - cast(less(abs(grad), scalar_like(grad, INFINITY)), DType::f32));
      bad = bad ? bad + count : count;
    }
    if (complete_sum) bad = complete_sum(bad);
    finite = equal(bad, scalar_like(bad, 0.0));
  }
  if (options.clip_grad_norm > 0) {
    ScopeGuard in_clip(g, "clip");
    Value total;
    for (const Value& grad : gs) {
      Value sq = sum(cast(grad * grad, DType::f32));
      total = total ? total + sq : sq;
    }
    if (complete_sum) total = complete_sum(total);
    Value norm = sqrt(total);
    Value factor = minimum(scalar_like(norm, 1.0), options.clip_grad_norm / (norm + 1e-6));
    for (Value& grad : gs)
      grad = grad * cast(factor, grad.dtype());
  }

  // Skipped updates do not count towards AdamW's bias correction.
  Value t = scaling ? step_count - cast(skipped, DType::f64) : step_count;
  UpdateResult result;
  const double decay_of_optimizer =
      std::visit([](const auto& o) { return o.weight_decay; }, options.optimizer);
  for (std::size_t i = 0; i < params.size(); ++i) {
    ScopeGuard in_parameter(g, names[i]);
    Value p = params[i], grad = gs[i];
    DType dt = p.dtype();
    Value step = cast(lr, dt);
    double weight_decay = decay_of_optimizer;
    if (auto own = options.per_parameter.find(names[i]); own != options.per_parameter.end()) {
      weight_decay = own->second.weight_decay;
      if (own->second.lr_scale != 1.0) step = step * own->second.lr_scale;
    }
    auto state_input = [&](const std::string& which) {
      return input_once(g, step_names::optimizer_state(which, names[i]), p.type());
    };
    UpdatedParameter u;
    if (const auto* adam = std::get_if<AdamW>(&options.optimizer)) {
      Value m = state_input("m"), v = state_input("v");
      Value bias1 = 1.0 - pow(scalar_like(t, adam->beta1), t);
      Value bias2 = 1.0 - pow(scalar_like(t, adam->beta2), t);
      Value new_m = m * adam->beta1 + grad * (1.0 - adam->beta1);
      Value new_v = v * adam->beta2 + grad * grad * (1.0 - adam->beta2);
      Value m_hat = new_m / cast(bias1, dt);
      Value v_hat = new_v / cast(bias2, dt);
      Value decayed = weight_decay != 0.0 ? p - step * weight_decay * p : p;
      u.parameter = decayed - step * m_hat / (sqrt(v_hat) + adam->eps);
      u.state = {new_m, new_v};
    } else {
      const SGD& sgd = std::get<SGD>(options.optimizer);
      Value direction = weight_decay != 0.0 ? grad + p * weight_decay : grad;
      if (sgd.momentum != 0.0) {
        Value buffer = state_input("momentum");
        Value new_buffer = buffer * sgd.momentum + direction;
        direction = sgd.nesterov ? direction + new_buffer * sgd.momentum : new_buffer;
        u.state = {new_buffer};
      }
      u.parameter = p - step * direction;
    }
    if (scaling) {
      // A skipped update leaves the parameter and its state as they were.
      u.parameter = where(finite, u.parameter, p);
      std::vector<std::string> which = state_names(options.optimizer);
      for (std::size_t k = 0; k < u.state.size(); ++k)
        u.state[k] = where(finite, u.state[k], state_input(which[k]));
    }
    result.parameters.push_back(std::move(u));
  }
  if (scaling) {
    Value grown = good_steps + 1.0;
    Value grow =
        greater_equal(grown, scalar_like(grown, static_cast<double>(scaling->growth_interval)));
    Value zero = scalar_like(good_steps, 0.0);
    result.state = {
        {step_names::loss_scale,
         where(finite, where(grow, loss_scale * scaling->growth, loss_scale),
               loss_scale * scaling->backoff)},
        {step_names::loss_scale_good_steps, where(finite, where(grow, zero, grown), zero)},
        {step_names::loss_scale_skipped, skipped + (1.0 - cast(finite, DType::f32))},
    };
  }
  return result;
}

} // namespace sinter
