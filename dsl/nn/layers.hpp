// dsl/nn/layers.hpp — Linear, Embedding, LayerNorm and MLP modules
#pragma once
#include "dsl/nn/parameter.hpp"
#include "dsl/trace.hpp" // sinter::scope

#include <optional>

namespace sinter {

/// y = x · W + b with W [in, out] (PyTorch's default init: U(±1/√in)).
struct Linear {
  BOOST_HANA_DEFINE_STRUCT(Linear, (Parameter, weight), (Parameter, bias));

  Linear() = default;
  Linear(int64_t in, int64_t out, Init& init) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in));
    weight = Parameter(init.uniform({in, out}, bound));
    bias = Parameter(init.uniform({out}, bound), ParameterRole::bias);
  }
  Var operator()(const Var& x) const {
    module_scope self(weight, "weight");
    return Var(matmul(x.value(), weight.node()) + bias.node());
  }
};

/// Rows of a [vocab, dim] table looked up by integer ids (N(0, 0.02) init, as GPT-2).
struct Embedding {
  BOOST_HANA_DEFINE_STRUCT(Embedding, (Parameter, weight));

  Embedding() = default;
  Embedding(int64_t vocab, int64_t dim, Init& init)
      : weight(init.normal({vocab, dim}, 0.02), ParameterRole::embedding) {}
  Var operator()(const Var& ids) const {
    module_scope self(weight, "weight");
    return Var(gather(weight.node(), ids.value()));
  }
};

/// Normalises the last axis; gamma = 1, beta = 0 initially.
struct LayerNorm {
  BOOST_HANA_DEFINE_STRUCT(LayerNorm, (Parameter, gamma), (Parameter, beta));
  double eps = 1e-5;

  LayerNorm() = default;
  LayerNorm(int64_t dim, Init& init, double epsilon = 1e-5)
      : gamma(init.constant({dim}, 1.0), ParameterRole::norm),
        beta(init.constant({dim}, 0.0), ParameterRole::norm), eps(epsilon) {}
  Var operator()(const Var& x) const {
    module_scope self(gamma, "gamma");
    return Var(layernorm(x.value(), gamma.node(), beta.node(), eps));
  }
};

/// Drops elements with probability p during training. `key` is an integer scalar the step
/// passes in (e.g. seed * 1000003 + step): the same key drops the same elements, so a run is
/// reproducible and a resumed run continues identically. Pass no key (eval) to disable.
struct Dropout {
  double p = 0.0;

  Var operator()(const Var& x, const Var& key) const {
    if (p == 0.0 || !key) return x;
    return Var(dropout(x.value(), p, key.value()));
  }
};

/// gelu: the tanh approximation (GPT-2's `gelu_new`); gelu_exact: the erf form (BERT's and
/// ViT's `gelu`, PyTorch's nn.GELU()).
enum class Activation { relu, gelu, gelu_exact };

inline Value activate(Value x, Activation a) {
  switch (a) {
  case Activation::relu: return relu(x);
  case Activation::gelu: return gelu_tanh(x);
  case Activation::gelu_exact: return gelu_erf(x);
  }
  throw std::invalid_argument("sinter: unknown Activation");
}

/// Linear layers with an activation between them (none after the last).
struct MLP {
  BOOST_HANA_DEFINE_STRUCT(MLP, (std::vector<Linear>, layers));
  Activation activation = Activation::relu;

  MLP() = default;
  /// widths = {in, hidden..., out}.
  MLP(const std::vector<int64_t>& widths, Init& init, Activation act = Activation::relu)
      : activation(act) {
    for (std::size_t i = 0; i + 1 < widths.size(); ++i)
      layers.emplace_back(widths[i], widths[i + 1], init);
  }
  Var operator()(const Var& x) const {
    std::optional<module_scope> self;
    if (!layers.empty()) self.emplace(layers[0].weight, "layers.0.weight");
    Var h = x;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      scope in_layer("layers." + std::to_string(i)); // named like the layer's parameters
      h = layers[i](h);
      if (i + 1 < layers.size()) h = Var(activate(h.value(), activation));
    }
    return h;
  }
};

} // namespace sinter
