// dsl/nn/parameter.hpp — Parameter, seeded initialisation, and reflection over a model's params
#pragma once
#include "dsl/tensor.hpp"

#include <boost/hana.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace sinter {

/// What a parameter is to its module, for optimizer rules such as GPT-2's "no weight decay on
/// biases, norms and embeddings" (param_group::no_decay_on_biases_norms_embeddings): the
/// modules set it; a Parameter made by hand is a weight.
enum class ParameterRole : uint8_t { weight, bias, norm, embedding };

/// A trainable tensor: its current value on the host, and its node while a step is traced.
struct Parameter {
  HostTensor value;
  Var traced; ///< valid only inside a traced function
  ParameterRole role = ParameterRole::weight;

  Parameter() = default;
  explicit Parameter(HostTensor v, ParameterRole r = ParameterRole::weight)
      : value(std::move(v)), role(r) {}
  /// The parameter inside a traced function.
  Var var() const {
    if (!traced)
      throw std::logic_error("sinter: a Parameter was used outside a traced step or eval");
    return traced;
  }
  Value node() const { return var().value(); }
};

/// Deterministic initialisation: the same seed gives the same model.
class Init {
public:
  explicit Init(uint64_t seed) : rng_(seed) {}
  /// Draws nothing: random parameters start as zeros (constants are still set). For a model
  /// whose weights are loaded right after it is built (load_weights): drawing GPT-2 small's
  /// 124 M random numbers would take two seconds for nothing.
  static Init for_loading() {
    Init init(0);
    init.draw_ = false;
    return init;
  }
  HostTensor uniform(Shape shape, double bound, DType dtype = DType::f32) {
    std::uniform_real_distribution<double> d(-bound, bound);
    return fill(std::move(shape), dtype, [&] { return d(rng_); }, draw_);
  }
  HostTensor normal(Shape shape, double stddev, DType dtype = DType::f32) {
    std::normal_distribution<double> d(0.0, stddev);
    return fill(std::move(shape), dtype, [&] { return d(rng_); }, draw_);
  }
  HostTensor constant(Shape shape, double value, DType dtype = DType::f32) {
    return fill(std::move(shape), dtype, [&] { return value; });
  }

private:
  template <class F> HostTensor fill(Shape shape, DType dtype, F draw, bool drawn = true) {
    for (int64_t d : shape)
      if (d < 1)
        throw std::invalid_argument("sinter: a parameter of shape " + to_string(shape) +
                                    ": every size must be at least 1 — check the sizes the "
                                    "model was built with (widths, heads, vocabulary, context)");
    HostTensor t(dtype, std::move(shape)); // zeros
    if (!drawn) return t;
    if (dtype == DType::f32) { // the common case in bulk: the same values as set() stores
      auto* out = reinterpret_cast<float*>(t.bytes().data());
      for (int64_t i = 0; i < t.size(); ++i)
        out[i] = static_cast<float>(draw());
      return t;
    }
    for (int64_t i = 0; i < t.size(); ++i)
      t.set(i, draw());
    return t;
  }
  std::mt19937_64 rng_;
  bool draw_ = true;
};

/// Inside a module's forward: the scope of the module's whole path (`enc.layers.0`), read from
/// the input its parameter `member` (the parameter's path inside the module: `weight`,
/// `qkv.weight`) was bound to for the trace. So a module called as a member of your own struct
/// (`m.enc(x)`) still names its whole path in profiles, --check-numerics and shape errors, and
/// a distillation teacher's modules read `teacher.…`. Nothing is entered when the parameter is
/// not a traced input: then the enclosing scopes name the module, as `sinter::scope` does.
class module_scope {
public:
  [[nodiscard]] module_scope(const Parameter& parameter, std::string_view member) {
    if (!parameter.traced) return;
    Value v = parameter.traced.value();
    // A frozen teacher's parameter stored in lower precision is a cast of its input.
    if (v.node().op == OpId::cast && !v.node().inputs.empty())
      v = Value{v.graph, v.node().inputs[0]};
    for (const NamedValue& in : v.graph->inputs()) {
      if (in.id != v.id) continue;
      const std::string& name = in.name;
      if (name.size() <= member.size() + 1 || !name.ends_with(member) ||
          name[name.size() - member.size() - 1] != '.')
        return;
      guard_.emplace(*v.graph, std::string_view(name).substr(0, name.size() - member.size() - 1),
                     ScopeGuard::WholePath{});
      return;
    }
  }

private:
  std::optional<ScopeGuard> guard_;
};

namespace detail {
template <class T> struct is_std_vector : std::false_type {};
template <class T, class A> struct is_std_vector<std::vector<T, A>> : std::true_type {};
template <class T> struct is_std_optional : std::false_type {};
template <class T> struct is_std_optional<std::optional<T>> : std::true_type {};

inline std::string join_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
} // namespace detail

namespace detail {

/// A callback over (dotted name, Parameter&) that is not a template parameter, so that the walk
/// over a model's modules is instantiated once per module type rather than once per callback
/// (a notebook session pays in memory for every instantiation).
class ParameterVisitor {
public:
  template <class F>
  explicit ParameterVisitor(F& f)
      : callback_(&f), call_([](void* callback, const std::string& name, Parameter& p) {
          (*static_cast<F*>(callback))(name, p);
        }) {}
  void operator()(const std::string& name, Parameter& p) const { call_(callback_, name, p); }

private:
  void* callback_;
  void (*call_)(void*, const std::string&, Parameter&);
};

template <class M>
void visit_parameters(M& module, ParameterVisitor visit, const std::string& prefix) {
  using T = std::remove_cvref_t<M>;
  if constexpr (std::is_same_v<T, Parameter>) {
    visit(prefix, module);
  } else if constexpr (is_std_vector<T>::value) {
    for (std::size_t i = 0; i < module.size(); ++i)
      visit_parameters(module[i], visit, join_path(prefix, std::to_string(i)));
  } else if constexpr (is_std_optional<T>::value) {
    if (module) visit_parameters(*module, visit, prefix);
  } else if constexpr (boost::hana::Struct<T>::value) {
    boost::hana::for_each(boost::hana::accessors<T>(), [&](auto pair) {
      std::string name = boost::hana::to<const char*>(boost::hana::first(pair));
      visit_parameters(boost::hana::second(pair)(module), visit, join_path(prefix, name));
    });
  }
}

} // namespace detail

/// Calls f(dotted_name, Parameter&) for every parameter of a module, in declaration order:
/// members declared with BOOST_HANA_DEFINE_STRUCT, recursing into sub-modules, std::vectors of
/// them (`blocks.3.attn.qkv.weight`) and std::optionals of them (a module the configuration may
/// leave out, such as ViT's class token: visited when present, under the member's name). Other
/// members are configuration.
template <class M, class F>
void for_each_parameter(M& module, F&& f, const std::string& prefix = "") {
  detail::visit_parameters(module, detail::ParameterVisitor(f), prefix);
}

/// Number of scalar weights in the model.
template <class M> int64_t parameter_count(M& model) {
  int64_t n = 0;
  for_each_parameter(model, [&](const std::string&, Parameter& p) { n += p.value.size(); });
  return n;
}

} // namespace sinter
