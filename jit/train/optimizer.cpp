// jit/train/optimizer.cpp — SGD/AdamW updates and gradient clipping built from ops
#include "jit/train/optimizer.hpp"

#include <stdexcept>

namespace sinter {

std::vector<std::string> state_names(const Optimizer& optimizer) {
  if (std::holds_alternative<AdamW>(optimizer)) return {"m", "v"};
  return std::get<SGD>(optimizer).momentum != 0.0 ? std::vector<std::string>{"momentum"}
                                                  : std::vector<std::string>{};
}

std::vector<std::string> scalar_names(const Optimizer& optimizer) {
  if (std::holds_alternative<AdamW>(optimizer))
    return {"opt.lr", "opt.grad_scale", "opt.bias1", "opt.bias2"};
  return {"opt.lr", "opt.grad_scale"};
}

std::vector<UpdatedParameter> append_update(Graph& g, const std::vector<std::string>& names,
                                            const std::vector<Value>& params,
                                            const std::vector<Value>& grads,
                                            const UpdateOptions& options) {
  if (names.size() != params.size() || params.size() != grads.size())
    throw std::invalid_argument("sinter: append_update needs one name and gradient per parameter");
  std::vector<Value> scalars;
  for (const std::string& s : scalar_names(options.optimizer))
    scalars.push_back(input(g, s, TensorType{DType::f64, {}})); // cast to each param dtype
  Value lr = scalars[0], grad_scale = scalars[1];

  // Gradients in the parameter's dtype, scaled for accumulation, then clipped by global norm.
  std::vector<Value> gs;
  for (std::size_t i = 0; i < grads.size(); ++i)
    gs.push_back(grads[i] * cast(grad_scale, grads[i].dtype()));
  if (options.clip_grad_norm > 0) {
    Value total;
    for (const Value& grad : gs) {
      Value sq = sum(cast(grad * grad, DType::f32));
      total = total ? total + sq : sq;
    }
    Value norm = sqrt(total);
    Value factor = minimum(scalar_like(norm, 1.0), options.clip_grad_norm / (norm + 1e-6));
    for (Value& grad : gs)
      grad = grad * cast(factor, grad.dtype());
  }

  std::vector<UpdatedParameter> out;
  for (std::size_t i = 0; i < params.size(); ++i) {
    Value p = params[i], grad = gs[i];
    DType t = p.dtype();
    Value step = cast(lr, t);
    auto state_input = [&](const std::string& which) {
      return input(g, "state." + which + "." + names[i], p.type());
    };
    UpdatedParameter u;
    if (const auto* adam = std::get_if<AdamW>(&options.optimizer)) {
      Value m = state_input("m"), v = state_input("v");
      Value new_m = m * adam->beta1 + grad * (1.0 - adam->beta1);
      Value new_v = v * adam->beta2 + grad * grad * (1.0 - adam->beta2);
      Value m_hat = new_m / cast(scalars[2], t);
      Value v_hat = new_v / cast(scalars[3], t);
      Value decayed = adam->weight_decay != 0.0 ? p - step * adam->weight_decay * p : p;
      u.parameter = decayed - step * m_hat / (sqrt(v_hat) + adam->eps);
      u.state = {new_m, new_v};
    } else {
      const SGD& sgd = std::get<SGD>(options.optimizer);
      Value direction = sgd.weight_decay != 0.0 ? grad + p * sgd.weight_decay : grad;
      if (sgd.momentum != 0.0) {
        Value buffer = state_input("momentum");
        Value new_buffer = buffer * sgd.momentum + direction;
        direction = sgd.nesterov ? direction + new_buffer * sgd.momentum : new_buffer;
        u.state = {new_buffer};
      }
      u.parameter = p - step * direction;
    }
    out.push_back(std::move(u));
  }
  return out;
}

} // namespace sinter
