// dsl/trace.hpp — tracing a function of Tensors into a Graph, then compiling and running it
// jit(fn), grad(fn) and value_and_grad(fn) return callables taking one HostTensor per parameter.
// Each distinct set of argument types (dyn dims resolved) is traced and compiled once, then
// reused; scope() and full() reach the graph being traced through a thread-local pointer.
#pragma once
#include "dsl/operators.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace sinter {
namespace detail {

// NOTE: scope() and full() run inside the user's traced function, which is handed Tensors but
// no Graph. The tracer points active_trace_graph() (ops/value.hpp: a thread_local inside
// libsinter, so code compiled by a notebook's interpreter shares it) at the graph for the
// duration of one trace, restoring the previous value so traces nest.

/// Makes `g` the graph being traced on this thread while it lives.
class ActiveTrace {
public:
  explicit ActiveTrace(Graph& g) : previous_(std::exchange(active_trace_graph(), &g)) {}
  ~ActiveTrace() { active_trace_graph() = previous_; }
  ActiveTrace(const ActiveTrace&) = delete;
  ActiveTrace& operator=(const ActiveTrace&) = delete;

private:
  Graph* previous_;
};

inline Graph& current_graph(std::string_view who) {
  Graph* active_graph = active_trace_graph();
  if (!active_graph)
    throw std::logic_error("sinter: " + std::string(who) +
                           " is only valid inside a function traced by sinter::jit, "
                           "sinter::grad or sinter::value_and_grad");
  return *active_graph;
}

/// The parameter and result types of a function pointer or a (non-generic) lambda.
template <class F> struct signature : signature<decltype(&F::operator())> {};
template <class R, class... P> struct signature<R (*)(P...)> {
  using result = R;
  using params = std::tuple<std::remove_cvref_t<P>...>;
};
template <class R, class... P> struct signature<R (*)(P...) noexcept> : signature<R (*)(P...)> {};
template <class R, class C, class... P>
struct signature<R (C::*)(P...) const> : signature<R (*)(P...)> {};
template <class R, class C, class... P>
struct signature<R (C::*)(P...) const noexcept> : signature<R (*)(P...)> {};

template <class T> struct is_tuple : std::false_type {};
template <class... T> struct is_tuple<std::tuple<T...>> : std::true_type {};

template <class P>
concept TracedParameter = is_tensor<P>::value || std::same_as<P, Var>;

/// One input node per parameter, checked against the parameter's static type.
template <class P>
P make_parameter(Graph& g, const HostTensor& arg, const std::string& name, std::size_t index) {
  static_assert(TracedParameter<P>, "sinter: every parameter of a traced function must be a "
                                    "sinter::Tensor<dtype, dims...> or a sinter::Var");
  TensorType got{arg.dtype(), arg.shape()};
  if constexpr (std::same_as<P, Var>) {
    return Var(input(g, name, got));
  } else {
    std::string why = mismatch_reason(P::static_type, got);
    if (!why.empty())
      throw std::invalid_argument("sinter: argument '" + name + "' (parameter " +
                                  std::to_string(index) + ") expects " + describe(P::static_type) +
                                  " but got " + to_string(got) + ": " + why);
    return P(input(g, name, got));
  }
}

template <class T> void add_output(Graph& g, const std::string& name, const T& result) {
  static_assert(Operand<T>, "sinter: a traced function must return Tensors, expressions or Vars "
                            "(or a std::tuple of them)");
  Value v = value_of(result);
  if (v.graph != &g)
    throw std::logic_error("sinter: output '" + name + "' is a tensor of another trace");
  g.add_output(name, v.id);
}

/// Outputs are named `out` (one result) or `out0`, `out1`, ... (a std::tuple).
template <class R> void add_outputs(Graph& g, const R& result) {
  if constexpr (is_tuple<R>::value) {
    std::size_t i = 0;
    std::apply([&](const auto&... r) { (add_output(g, "out" + std::to_string(i++), r), ...); },
               result);
  } else {
    add_output(g, "out", result);
  }
}

inline std::string signature_key(std::span<const HostTensor> args) {
  std::string key;
  for (const HostTensor& a : args)
    key += to_string(TensorType{a.dtype(), a.shape()}) + ";";
  return key;
}

/// Why arguments of these types need a new specialisation: the first input whose type differs
/// from the last compiled one, naming the dim and its old and new size.
inline std::string recompile_reason(const std::vector<TensorType>& before,
                                    std::span<const HostTensor> args,
                                    const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < args.size() && i < before.size(); ++i) {
    const TensorType& old = before[i];
    const std::string who = "input '" + names[i] + "'";
    if (old.dtype != args[i].dtype())
      return who + " dtype changed " + std::string(dtype_name(old.dtype)) + " -> " +
             std::string(dtype_name(args[i].dtype()));
    if (old.shape.size() != args[i].shape().size())
      return who + " rank changed " + to_string(old.shape) + " -> " + to_string(args[i].shape());
    for (std::size_t d = 0; d < old.shape.size(); ++d)
      if (old.shape[d] != args[i].shape()[d])
        return who + " dim " + std::to_string(d) + " changed " + std::to_string(old.shape[d]) +
               " -> " + std::to_string(args[i].shape()[d]);
  }
  return "new argument types";
}

/// What a compile built: time, kernel counts and peak memory, summed over `programs` (a
/// training step with accumulation compiles two; the peak is the largest of theirs).
inline std::string describe_compile(std::span<const CompiledGraph* const> programs) {
  CompileReport r;
  double seconds = 0;
  std::size_t peak = 0;
  std::vector<StageTime> stages;
  for (const CompiledGraph* c : programs) {
    stages.insert(stages.end(), c->stage_times().begin(), c->stage_times().end());
    const CompileReport& p = c->compile_report();
    r.kernels += p.kernels;
    r.compiled += p.compiled;
    r.from_disk += p.from_disk;
    r.from_memory += p.from_memory;
    r.generated += p.generated;
    seconds += c->compile_seconds();
    peak = std::max<std::size_t>(peak, c->memory_plan().peak_bytes());
  }
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "in %.1f ms: %zu kernels (%zu compiled, %zu loaded from the disk cache, %zu "
                "reused in memory, %zu library GEMMs); peak memory %.1f KiB",
                seconds * 1e3, r.kernels, r.compiled, r.from_disk, r.from_memory,
                r.kernels - r.generated, static_cast<double>(peak) / 1024);
  // Where the time went: a slow compile names its stage (SINTER_TIME_PHASES=1: every stage).
  return buf + ("; slowest stages: " + slowest_stages(stages, 3));
}

/// A batch argument and the source line of the call it was passed to: the first parameter of
/// a step's call operator, so a recompile can name where it was called from.
struct CallSite {
  CallSite(const HostTensor& t, std::source_location w = std::source_location::current())
      : tensor(t), where(w) {}
  const HostTensor& tensor;
  std::source_location where;
};

/// The compile line of a cache of programs keyed by argument types (jit, grad, value_and_grad,
/// compile_step, compile_eval): `sinter: compiled (<why>, specialisation <n>) in ...`, where
/// why is `first call` or `recompiling, <the first input whose type changed>`.
class CompileLog {
public:
  /// Why arguments of these types needed a compile, judged against the previous compile.
  std::string reason(std::span<const HostTensor> args,
                     const std::vector<std::string>& names) const {
    return compiles_ == 0 ? std::string("first call")
                          : "recompiling, " + recompile_reason(last_types_, args, names);
  }
  /// Logs one compile of `programs` for `args` (nothing on the interpreter, which compiles no
  /// code) and remembers the argument types for the next reason(). A recompile's line ends
  /// with the caller's source line (`where`, when known) and the compile time so far; the
  /// running profile (docs/profiling.md) counts it.
  void compiled(const std::string& why, std::size_t specialisation,
                std::span<const HostTensor> args, std::span<const CompiledGraph* const> programs,
                std::optional<std::source_location> where = std::nullopt) {
    for (const CompiledGraph* c : programs)
      seconds_ += c->compile_seconds();
    std::string tail;
    if (compiles_ > 0) {
      std::string at =
          where ? " at " + std::string(where->file_name()) + ":" + std::to_string(where->line())
                : std::string();
      profile::recompiled(why + at);
      char total[96];
      std::snprintf(total, sizeof total, "; %zu compiles so far took %.2f s", compiles_ + 1,
                    seconds_);
      tail = (where ? "; called" + at : std::string()) + total;
    }
    ++compiles_;
    last_types_.clear();
    for (const HostTensor& a : args)
      last_types_.push_back(TensorType{a.dtype(), a.shape()});
    if (!programs.empty() && programs.front()->backend() != Backend::interpreter)
      log_line("sinter: compiled (" + why + ", specialisation " + std::to_string(specialisation) +
               ") " + describe_compile(programs) + tail);
  }

private:
  std::size_t compiles_ = 0;
  double seconds_ = 0;                 // compile time of every compile so far
  std::vector<TensorType> last_types_; // of the latest compile
};

} // namespace detail

/// A tensor with its name, as gradients come back.
struct NamedTensor {
  std::string name;
  HostTensor tensor;
};

/// Gradients by parameter name, in the order they were asked for.
class Gradients {
public:
  Gradients() = default;
  explicit Gradients(std::vector<NamedTensor> items) : items_(std::move(items)) {}

  /// The gradient with respect to parameter `name`; throws std::out_of_range naming the known ones.
  const HostTensor& operator[](std::string_view name) const {
    std::string known;
    for (const NamedTensor& item : items_) {
      if (item.name == name) return item.tensor;
      known += (known.empty() ? "" : ", ") + item.name;
    }
    throw std::out_of_range("sinter: no gradient for '" + std::string(name) +
                            "' (gradients: " + known + ")");
  }
  std::size_t size() const { return items_.size(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

private:
  std::vector<NamedTensor> items_;
};

/// What value_and_grad returns: output 0 (the loss), the other outputs, and the gradients.
struct GradResult {
  HostTensor value;
  std::vector<HostTensor> aux;
  Gradients grads;
  const HostTensor& grad(std::string_view name) const { return grads[name]; }
};

namespace detail {
/// Splits a differentiated graph's outputs: the function's own (the loss first, then the rest
/// as aux) and the gradients (outputs named `grad:<input>`).
inline GradResult split_gradients(const Graph& compiled, std::vector<HostTensor> outputs) {
  GradResult split;
  std::vector<NamedTensor> grads;
  const std::vector<NamedValue>& named = compiled.outputs();
  bool has_value = false;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    std::string_view name = named[i].name;
    if (std::optional<std::string> input = gradient_input_name(name))
      grads.push_back({*input, std::move(outputs[i])});
    else if (!std::exchange(has_value, true))
      split.value = std::move(outputs[i]);
    else
      split.aux.push_back(std::move(outputs[i]));
  }
  split.grads = Gradients(std::move(grads));
  return split;
}
} // namespace detail

/// Options of jit(): names of the parameters (default `arg0`, `arg1`, ...), used for the
/// graph's inputs and in error messages.
struct TraceOptions {
  std::vector<std::string> names;
};

/// Options of grad() and value_and_grad(): parameter names as for jit(), and the names of the
/// parameters to differentiate with respect to (default: every floating-point parameter).
struct GradOptions {
  std::vector<std::string> names;
  std::vector<std::string> wrt;
};

/// What calling a traced function returns.
enum class Returns { outputs, gradients, value_and_gradients };

/// A traced, compiled function, callable with one HostTensor per parameter of `Fn`.
template <class Fn, Returns R> class Function {
  using params = typename detail::signature<Fn>::params;
  using result = typename detail::signature<Fn>::result;

public:
  static constexpr std::size_t arity = std::tuple_size_v<params>;

  Function(Fn fn, std::vector<std::string> names, std::optional<AutodiffOptions> autodiff)
      : fn_(std::move(fn)), names_(std::move(names)), autodiff_(std::move(autodiff)) {
    if (names_.empty())
      for (std::size_t i = 0; i < arity; ++i)
        names_.push_back("arg" + std::to_string(i));
    if (names_.size() != arity)
      throw std::invalid_argument("sinter: " + std::to_string(names_.size()) +
                                  " parameter names given for a function of " +
                                  std::to_string(arity) + " parameters");
  }

  /// Runs on `args`: jit gives the output (a HostTensor, or a vector for a std::tuple result),
  /// grad gives Gradients, value_and_grad a GradResult.
  /// A recompile's line names the calling source line.
  template <class... H>
    requires(std::same_as<std::remove_cvref_t<H>, HostTensor> && ...)
  auto operator()(detail::CallSite first, H&&... rest) const {
    static_assert(sizeof...(H) + 1 == arity, "sinter: pass one HostTensor per traced parameter");
    // Borrowed, not copied: the caller's tensors outlive the call, and a batch can be large.
    std::array<HostTensor, sizeof...(H) + 1> packed{HostTensor::borrow(first.tensor),
                                                    HostTensor::borrow(rest)...};
    return call(packed, first.where);
  }
  /// A function of no parameters.
  auto operator()() const
    requires(arity == 0)
  {
    return call({});
  }

  /// The same, with the arguments in a span.
  auto call(std::span<const HostTensor> args,
            std::source_location where = std::source_location::current()) const {
    const CompiledGraph& compiled = compile(args, where);
    std::vector<HostTensor> outputs = compiled.run(args);
    if constexpr (R == Returns::outputs) {
      if constexpr (detail::is_tuple<result>::value)
        return outputs;
      else
        return std::move(outputs.at(0));
    } else {
      GradResult split = detail::split_gradients(compiled.graph(), std::move(outputs));
      if constexpr (R == Returns::gradients)
        return split.grads;
      else
        return split;
    }
  }

  /// The compiled graph for arguments of these types, tracing `fn` if they are new.
  const CompiledGraph& compile(std::span<const HostTensor> args,
                               std::source_location where = std::source_location::current()) const {
    if (args.size() != arity)
      throw std::invalid_argument("sinter: traced function takes " + std::to_string(arity) +
                                  " arguments, got " + std::to_string(args.size()));
    std::string key = detail::signature_key(args);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    const auto started = std::chrono::steady_clock::now();
    Graph traced = trace(args, std::make_index_sequence<arity>{});
    const double traced_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    const CompiledGraph& compiled =
        cache_
            .emplace(key, CompiledGraph(std::move(traced), autodiff_, default_device(), nullptr,
                                        traced_ms, autodiff_ ? "grad" : "jit"))
            .first->second;
    const CompiledGraph* programs[] = {&compiled};
    log_.compiled(log_.reason(args, names_), cache_.size(), args, programs, where);
    return compiled;
  }

  /// How many distinct argument signatures have been traced (a new batch size traces anew).
  std::size_t trace_count() const { return cache_.size(); }
  const std::vector<std::string>& names() const { return names_; }

private:
  template <std::size_t... I>
  Graph trace(std::span<const HostTensor> args, std::index_sequence<I...>) const {
    Graph g;
    detail::ActiveTrace active(g);
    // Braced initialisation creates the inputs in parameter order.
    params tensors{
        detail::make_parameter<std::tuple_element_t<I, params>>(g, args[I], names_[I], I)...};
    detail::add_outputs(g, std::apply(fn_, tensors));
    return g;
  }

  Fn fn_;
  std::vector<std::string> names_;
  std::optional<AutodiffOptions> autodiff_;
  mutable std::map<std::string, CompiledGraph> cache_; // by argument types; see trace_count()
  mutable detail::CompileLog log_;
};

/// Traces `fn` (parameters: Tensor<...> or Var) into a graph on first call and runs it.
template <class Fn> auto jit(Fn fn, TraceOptions options = {}) {
  return Function<Fn, Returns::outputs>(std::move(fn), std::move(options.names), std::nullopt);
}

/// The same as jit(): the first call traces and compiles, later calls with the same argument
/// types reuse the compiled code, new types compile a new specialisation (and log why).
template <class Fn> auto compile(Fn fn, TraceOptions options = {}) {
  return jit(std::move(fn), std::move(options));
}

/// Gradients of `fn`'s first output (a scalar loss) with respect to options.wrt.
/// Asking for an integer parameter throws std::invalid_argument on the first call.
template <class Fn> auto grad(Fn fn, GradOptions options = {}) {
  return Function<Fn, Returns::gradients>(std::move(fn), std::move(options.names),
                                          AutodiffOptions{std::move(options.wrt), 0});
}

/// The loss (output 0), any other outputs, and the gradients, from one compiled graph.
template <class Fn> auto value_and_grad(Fn fn, GradOptions options = {}) {
  return Function<Fn, Returns::value_and_gradients>(std::move(fn), std::move(options.names),
                                                    AutodiffOptions{std::move(options.wrt), 0});
}

/// Names the model path of the nodes built while it lives (`sinter::scope fc1("mlp.fc1");`),
/// so shape errors and profiles say `at mlp.fc1`. Scopes nest with dots.
class scope {
public:
  [[nodiscard]] explicit scope(std::string_view name)
      : guard_(detail::current_graph("sinter::scope"), name) {}

private:
  ScopeGuard guard_;
};

/// A constant tensor of static dims in the current trace: full<f32, 3>(0.5).
template <DType D, std::size_t... Ds> Tensor<D, Ds...> full(double value) {
  static_assert(((Ds != dyn) && ...), "sinter: full needs static dims");
  return Tensor<D, Ds...>(constant(detail::current_graph("sinter::full"), value, D,
                                   Shape{static_cast<int64_t>(Ds)...}));
}

} // namespace sinter
