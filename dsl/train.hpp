// dsl/train.hpp — compile_step (forward + loss + backward + update as one program), compile_eval,
// value_and_grad over a model, optimizers and learning-rate schedules
#pragma once
#include "dsl/nn/parameter.hpp"
#include "dsl/trace.hpp"
#include "jit/dist/communicator.hpp"
#include "jit/train/shape_buckets.hpp"
#include "jit/train/train_step.hpp" // dsl/ reaches jit/ through the façade and these rooms
#include "ops/padding.hpp"

#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <numbers>
#include <optional>
#include <stdexcept>

namespace sinter {

namespace amp {
/// Mixed-precision modes of compile_step (`{.amp = amp::bf16}`; docs/amp.md).
inline constexpr AmpMode off = AmpMode::off;
inline constexpr AmpMode bf16 = AmpMode::bf16;
inline constexpr AmpMode fp16 = AmpMode::fp16;
/// Region precisions for amp::region: fp32 keeps everything traced in it in f32; low makes it
/// compute in the step's low precision. Without AMP a region changes nothing.
inline constexpr RegionPrecision fp32 = RegionPrecision::fp32;
inline constexpr RegionPrecision low = RegionPrecision::low;

/// Marks the precision of every op traced while it lives, over each op's own rule:
/// `sinter::amp::region keep(sinter::amp::fp32);`. Regions nest; the innermost wins.
class region {
public:
  [[nodiscard]] explicit region(RegionPrecision precision)
      : graph_(detail::current_graph("sinter::amp::region")) {
    graph_.push_precision(precision);
  }
  ~region() { graph_.pop_scope(); }
  region(const region&) = delete;
  region& operator=(const region&) = delete;

private:
  Graph& graph_;
};
} // namespace amp

/// A parameter group: the parameters `match` picks, by their path (`blocks.0.ln1.gamma`) and
/// their Parameter (its role, its value's shape), train with this group's weight decay and
/// learning-rate scale. An optimizer's groups are tried in order: the first that matches a
/// parameter sets it; a parameter no group matches takes the optimizer's own settings.
struct param_group {
  std::function<bool(const std::string& path, const Parameter& parameter)> match;
  std::optional<double> weight_decay; ///< unset: the optimizer's
  double lr_scale = 1.0;

  /// GPT-2's rule: no weight decay on biases, normalisation gains and shifts, embeddings and
  /// learned positions (every Parameter whose role is not ParameterRole::weight).
  static param_group no_decay_on_biases_norms_embeddings() {
    return {.match = [](const std::string&,
                        const Parameter& p) { return p.role != ParameterRole::weight; },
            .weight_decay = 0.0};
  }
};

/// AdamW; `lr` is the base learning rate the schedule scales.
struct adamw {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  std::vector<param_group> groups; ///< parameters with their own decay or lr scale
};
/// SGD with optional (Nesterov) momentum and L2 weight decay.
struct sgd {
  double lr = 0.01, momentum = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  std::vector<param_group> groups; ///< parameters with their own decay or lr scale
};

/// Learning rate of optimizer step `step` (0-based). Fed to the compiled step as a runtime
/// scalar, so changing it never recompiles.
using Schedule = std::function<double(int64_t step)>;

inline Schedule constant_schedule(double lr) {
  return [lr](int64_t) { return lr; };
}
/// Linear warm-up to `peak` over `warmup` steps, then cosine decay to `peak * final_fraction`
/// at `total` steps (held there after).
inline Schedule warmup_cosine(double peak, int64_t warmup, int64_t total,
                              double final_fraction = 0.0) {
  return [=](int64_t step) {
    if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
    double progress = std::min(1.0, static_cast<double>(step - warmup) /
                                        static_cast<double>(std::max<int64_t>(1, total - warmup)));
    double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    return peak * (final_fraction + (1.0 - final_fraction) * cosine);
  };
}
/// Learning rate for a batch k times larger: linear (×k) or square-root (×√k) scaling.
inline double scale_lr_linear(double lr, double k) { return lr * k; }
inline double scale_lr_sqrt(double lr, double k) { return lr * std::sqrt(k); }

struct StepOptions {
  /// Each grouped parameter's weight decay and lr scale, by name: compile_step fills it from
  /// the optimizer's `groups` (param_group).
  std::map<std::string, ParameterUpdate> parameter_updates;
  /// Names of the batch parameters (default batch0, batch1, ...).
  std::vector<std::string> batch_names;
  /// Default: the optimizer's lr, constant.
  Schedule schedule;
  /// Rescale gradients when their global L2 norm exceeds this (0: off).
  double clip_grad_norm = 0.0;
  /// Micro-batches whose gradients are summed (and averaged) before each update.
  int64_t accumulate = 1;
  /// Mixed precision: amp::off, amp::bf16 or amp::fp16 (docs/amp.md).
  AmpMode amp = AmpMode::off;
  /// fp16 only: dynamic loss-scaling settings (default LossScaling{} under amp::fp16).
  std::optional<LossScaling> loss_scaling;
  /// Launched with several ranks (mpirun, docs/distributed.md), average the gradients over
  /// them before each update (data parallel). false: this rank trains on its own.
  bool data_parallel = true;
  /// Data parallel: ZeRO stage 0, 1 or 2 (docs/distributed.md, "ZeRO"). 1 shards the optimizer
  /// state over the ranks; 2 also reduce-scatters the gradients.
  int zero = 0;
  /// Data parallel: the gradient bucket size in bytes (each bucket's reduction starts as soon
  /// as the backward pass has produced it; the first holds at most 1 MiB).
  int64_t bucket_bytes = int64_t{25} << 20;
  /// Data parallel: compare the ranks' parameter checksums every this many updates; a rank that
  /// drifted stops every rank with the parameter named (0: only at the first call).
  int64_t check_every = 0;
  /// In-step sifting (docs/sifting.md): the loss function then returns each row's loss
  /// ([batch], e.g. cross_entropy(..., Reduction::none)); each update draws `sift_rows` rows
  /// by the rule inside the step and backpropagates only their mean loss.
  std::optional<SiftOptions> sift;
  /// In-step sifting: rows each update trains on (0: round(batch / (1 + beta))).
  int64_t sift_rows = 0;
  /// cuda: the batch stays on the device like a frozen input: one buffer, uploaded only when a
  /// call passes a tensor whose value changed (another tensor, or one written since:
  /// HostTensor::stamp). For a loop that trains on one batch again and again (a benchmark, an
  /// overfitting check), as PyTorch code that keeps its batch on the GPU does; with a new batch
  /// every call it only moves the upload from the copy stream onto the step's own stream.
  bool resident_batch = false;
  /// Shape buckets (docs/profiling.md, "Shape buckets"): batch input name → sizes, e.g.
  /// {{"ids", {64, 128, 256, 512}}, {"next", {64, 128, 256, 512}}}. Dim 1 of those inputs is
  /// zero-padded to the smallest size that holds it, and the padding is masked out of the
  /// losses (cross-entropy, MSE, distillation, padded_mean) and of attention's keys: variable
  /// lengths compile at most one program per bucket.
  ShapeBuckets buckets;
};

struct StepOutput {
  LossHandle loss; ///< reading it costs nothing extra and never recompiles
  int64_t step;    ///< optimizer steps done after this call
  double lr;       ///< learning rate used for this call
};

namespace detail {

inline Optimizer to_optimizer(const adamw& a) {
  return AdamW{a.beta1, a.beta2, a.eps, a.weight_decay};
}
inline Optimizer to_optimizer(const sgd& s) { return SGD{s.momentum, s.nesterov, s.weight_decay}; }

/// A model's parameters in for_each_parameter's order, with their names.
struct NamedParameters {
  std::vector<std::string> names;
  std::vector<Parameter*> parameters;
  std::vector<HostTensor*> values() const {
    std::vector<HostTensor*> out;
    for (Parameter* p : parameters)
      out.push_back(&p->value);
    return out;
  }
};

/// The settings `optimizer`'s groups give `model`'s parameters (param_group), by name.
template <class Model, class Opt>
std::map<std::string, ParameterUpdate> parameter_updates(Model& model, const Opt& optimizer) {
  std::map<std::string, ParameterUpdate> out;
  if (optimizer.groups.empty()) return out;
  for_each_parameter(model, [&](const std::string& name, Parameter& p) {
    for (const param_group& group : optimizer.groups)
      if (group.match && group.match(name, p)) {
        out[name] = {group.weight_decay.value_or(optimizer.weight_decay), group.lr_scale};
        break;
      }
  });
  return out;
}

template <class Model> NamedParameters named_parameters(Model& model) {
  NamedParameters named;
  for_each_parameter(model, [&](const std::string& name, Parameter& p) {
    named.names.push_back(name);
    named.parameters.push_back(&p);
  });
  return named;
}

/// The model's parameters as the graph's first inputs while it is traced (the part of
/// trace_with_model that is the same for every model type).
class TracedParameters {
public:
  TracedParameters(Graph& g, const NamedParameters& named) : parameters_(named.parameters) {
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      Parameter& p = *parameters_[i];
      p.traced = Var(input(g, named.names[i], TensorType{p.value.dtype(), p.value.shape()}));
    }
  }
  ~TracedParameters() {
    for (Parameter* p : parameters_)
      p->traced = Var();
  }
  TracedParameters(const TracedParameters&) = delete;
  TracedParameters& operator=(const TracedParameters&) = delete;

private:
  std::vector<Parameter*> parameters_;
};

inline void check_batch_size(std::size_t given, std::size_t expected, bool bucketed) {
  if (given != expected + (bucketed ? 1 : 0))
    throw std::invalid_argument("sinter: the function takes " + std::to_string(expected) +
                                " batch inputs after the model, got " +
                                std::to_string(given - (bucketed ? 1 : 0)) +
                                " — pass one HostTensor each");
}

/// With `buckets`, the padding the bucketed batch (pad_to_bucket's, the lengths last) is traced
/// under: the lengths become the input bucket_lengths_name.
inline void begin_padding(Graph& g, std::span<const HostTensor> batch,
                          const std::vector<std::string>& batch_names, const ShapeBuckets* buckets,
                          std::optional<SequencePaddingScope>& padding) {
  if (!buckets) return;
  const HostTensor& lengths = batch.back();
  int64_t extent = 0;
  for (std::size_t i = 0; i + 1 < batch.size(); ++i)
    if (buckets->contains(batch_names[i])) extent = batch[i].shape().at(bucketed_dim);
  padding.emplace(
      SequencePadding{bucketed_dim, extent,
                      input(g, bucket_lengths_name, TensorType{lengths.dtype(), lengths.shape()})});
}

/// Traces `fn(model, batch...)` with the model's parameters as named inputs. With `buckets`,
/// `batch` is pad_to_bucket's (the lengths last): they become the input bucket_lengths_name,
/// and the function is traced with the padding current (ops/padding.hpp).
template <class Model, class Fn, std::size_t... I>
Graph trace_with_model(Model& model, const Fn& fn, std::span<const HostTensor> batch,
                       const std::vector<std::string>& batch_names, std::index_sequence<I...>,
                       const ShapeBuckets* buckets = nullptr) {
  using params = typename signature<Fn>::params; // (Model, batch types...)
  check_batch_size(batch.size(), sizeof...(I), buckets != nullptr);
  Graph g;
  ActiveTrace active(g);
  TracedParameters traced(g, named_parameters(model));
  // Braced initialisation creates the batch inputs in call order (function arguments would not).
  std::tuple<std::tuple_element_t<I + 1, params>...> inputs{
      make_parameter<std::tuple_element_t<I + 1, params>>(g, batch[I], batch_names[I], I)...};
  std::optional<SequencePaddingScope> padding;
  begin_padding(g, batch, batch_names, buckets, padding);
  auto result = std::apply([&](auto&... in) { return fn(model, in...); }, inputs);
  add_outputs(g, result);
  return g;
}

template <class Fn> constexpr std::size_t batch_arity() {
  return std::tuple_size_v<typename signature<Fn>::params> - 1;
}

inline std::vector<std::string> default_batch_names(std::vector<std::string> names, std::size_t n) {
  if (names.empty())
    for (std::size_t i = 0; i < n; ++i)
      names.push_back("batch" + std::to_string(i));
  if (names.size() != n)
    throw std::invalid_argument("sinter: " + std::to_string(names.size()) + " batch names for " +
                                std::to_string(n) + " batch parameters");
  return names;
}

/// How a step traces `fn(model, batch...)`: `trace(function, batch, batch_names, buckets)`,
/// where `function` holds the model and the loss. A function pointer rather than a
/// std::function, which would instantiate its machinery once more for every model type.
struct StepTracer {
  Graph (*trace)(const void* function, std::span<const HostTensor> batch,
                 const std::vector<std::string>& batch_names, const ShapeBuckets* buckets);
  std::shared_ptr<const void> function;
};

template <class Model, class LossFn> struct ModelAndLoss {
  Model& model;
  LossFn fn;
  static Graph trace(const void* function, std::span<const HostTensor> batch,
                     const std::vector<std::string>& batch_names, const ShapeBuckets* buckets) {
    const auto& self = *static_cast<const ModelAndLoss*>(function);
    return trace_with_model(self.model, self.fn, batch, batch_names,
                            std::make_index_sequence<batch_arity<LossFn>()>{}, buckets);
  }
  static void destroy(const void* function) { delete static_cast<const ModelAndLoss*>(function); }
};

template <class Model, class LossFn> StepTracer step_tracer(Model& model, LossFn fn) {
  using Function = ModelAndLoss<Model, LossFn>;
  return {&Function::trace,
          std::shared_ptr<const void>(static_cast<const void*>(new Function{model, std::move(fn)}),
                                      &Function::destroy)};
}

/// What a compiled step does that depends on neither the model's type nor the loss's: kept out
/// of the CompiledStep template, so that a new model type (a notebook defines one per cell)
/// instantiates only its tracing.
class StepCore {
public:
  StepCore(std::size_t arity, StepTracer tracer, const NamedParameters& parameters,
           Optimizer optimizer, double lr, StepOptions options,
           std::vector<std::pair<std::string, const HostTensor*>> frozen,
           std::function<void()> before_call)
      : before_call_(std::move(before_call)),
        schedule_(options.schedule ? options.schedule : constant_schedule(lr)),
        batch_names_(default_batch_names(options.batch_names, arity)), buckets_(options.buckets) {
    if (!buckets_.empty()) {
      check_shape_buckets(buckets_, batch_names_);
      if (options.sift)
        throw std::invalid_argument(
            "sinter: shape buckets and in-step sifting cannot be combined (sifting draws rows "
            "by each row's loss, a padded row's is not one number) — drop one of them");
      bucketed_names_ = batch_names_;
      bucketed_names_.push_back(bucket_lengths_name);
    }
    auto trace = [tracer = std::move(tracer), batch_names = batch_names_,
                  buckets = buckets_](std::span<const HostTensor> batch) {
      Graph g = tracer.trace(tracer.function.get(), batch, batch_names,
                             buckets.empty() ? nullptr : &buckets);
      // The step needs the loss only: further results of a std::tuple are dropped.
      auto& outputs = g.mutable_outputs();
      if (outputs.size() > 1) outputs.erase(outputs.begin() + 1, outputs.end());
      return g;
    };
    TrainStepOptions step_options;
    step_options.update = UpdateOptions{optimizer, options.clip_grad_norm, options.loss_scaling,
                                        options.parameter_updates};
    step_options.accumulate = options.accumulate;
    step_options.amp = options.amp;
    step_options.frozen = std::move(frozen);
    if (!options.data_parallel) step_options.communicator = &lone_rank();
    step_options.zero = options.zero;
    step_options.bucket_bytes = options.bucket_bytes;
    step_options.check_every = options.check_every;
    step_options.sift = options.sift;
    step_options.sift_rows = options.sift_rows;
    step_options.resident_batch = options.resident_batch;
    runtime_ =
        std::make_unique<TrainStep>(trace, parameters.names, parameters.values(), step_options);
  }

  /// The step on a batch (one HostTensor per batch parameter) in a span. The first call with
  /// new batch types compiles (and logs the compile line); later calls with types seen before
  /// reuse that program. A recompile's line names the calling source line.
  StepOutput call(std::span<const HostTensor> batch,
                  std::source_location where = std::source_location::current()) {
    if (before_call_) before_call_();
    double lr = schedule_(runtime_->steps());
    std::optional<BucketedBatch> padded;
    if (!buckets_.empty()) {
      padded = pad_to_bucket(buckets_, batch_names_, batch);
      // The first compile also plans other buckets: its kernels then serve every bucket.
      if (runtime_->compilations() == 0)
        for (const std::vector<HostTensor>& other :
             batches_at_other_buckets(buckets_, batch_names_, *padded))
          runtime_->remember_other_shape(other);
      batch = padded->tensors;
    }
    LossHandle loss = (*runtime_)(batch, lr);
    if (std::size_t n = runtime_->compilations(); n != logged_) {
      logged_ = n;
      std::string why = log_.reason(batch, padded ? bucketed_names_ : batch_names_);
      if (padded) why += " (" + describe_bucket(buckets_, *padded) + ")";
      log_.compiled(why, n, batch, runtime_->programs(), where);
    }
    return StepOutput{loss, runtime_->steps(), lr};
  }

  int64_t steps() const { return runtime_->steps(); }
  TrainStep& runtime() { return *runtime_; }

  /// The memory a call with a batch of these types would need (planned, nothing compiled;
  /// only the batch's dtypes and shapes are read).
  StepMemory plan_memory(std::span<const HostTensor> batch) {
    if (buckets_.empty()) return runtime_->plan_memory(batch);
    return runtime_->plan_memory(pad_to_bucket(buckets_, batch_names_, batch).tensors);
  }
  /// The largest batch whose planned peak fits `budget_bytes` (dim 0 of every batch input is
  /// the batch size; `example` gives the other dims and the dtypes): see MaxBatch. With
  /// buckets, plan with an example of the largest length.
  MaxBatch max_batch(std::span<const HostTensor> example, int64_t budget_bytes) {
    if (buckets_.empty()) return runtime_->max_batch(example, budget_bytes);
    return runtime_->max_batch(pad_to_bucket(buckets_, batch_names_, example).tensors,
                               budget_bytes);
  }

private:
  std::function<void()> before_call_;
  Schedule schedule_;
  std::vector<std::string> batch_names_;
  ShapeBuckets buckets_;
  std::vector<std::string> bucketed_names_; // batch_names_ and the lengths, with buckets
  std::unique_ptr<TrainStep> runtime_;
  std::size_t logged_ = 0; // compilations already logged
  CompileLog log_;
};

} // namespace detail

/// A compiled training step over a model: call it with one HostTensor per batch parameter
/// (or a span of them with call()); steps(), runtime(), plan_memory() and max_batch() as in
/// detail::StepCore.
template <class Model, class LossFn> class CompiledStep : public detail::StepCore {
  static constexpr std::size_t arity = detail::batch_arity<LossFn>();

public:
  /// `frozen`: further graph inputs the step reads but never trains (a teacher's weights),
  /// by name; `before_call` runs before every call (refreshing them).
  CompiledStep(Model& model, LossFn fn, Optimizer optimizer, double lr, StepOptions options,
               std::vector<std::pair<std::string, const HostTensor*>> frozen = {},
               std::function<void()> before_call = {})
      : detail::StepCore(arity, detail::step_tracer(model, std::move(fn)),
                         detail::named_parameters(model), optimizer, lr, std::move(options),
                         std::move(frozen), std::move(before_call)) {}

  template <class... H>
    requires(std::same_as<std::remove_cvref_t<H>, HostTensor> && ...)
  StepOutput operator()(detail::CallSite first, H&&... rest) {
    static_assert(sizeof...(H) + 1 == arity, "sinter: pass one HostTensor per batch parameter");
    // Borrowed, not copied: the caller's tensors outlive the call, and a batch can be large.
    std::array<HostTensor, sizeof...(H) + 1> packed{HostTensor::borrow(first.tensor),
                                                    HostTensor::borrow(rest)...};
    return call(packed, first.where);
  }
};

/// Compiles `loss(model, batch...)` (a scalar) together with its gradients and the optimizer
/// update of every Parameter of `model` into one program. The model must outlive the step; its
/// parameters hold the updated weights after each call.
template <class Model, class LossFn, class Opt>
auto compile_step(Model& model, LossFn loss, Opt optimizer, StepOptions options = {}) {
  options.parameter_updates = detail::parameter_updates(model, optimizer);
  return CompiledStep<Model, LossFn>(model, std::move(loss), detail::to_optimizer(optimizer),
                                     optimizer.lr, std::move(options));
}

namespace detail {

/// `fn(model, batch...)` traced with the model's parameters as its first inputs (named as
/// for_each_parameter names them), compiled once per batch types (logging the compile line),
/// and run with the parameters' current values: what compile_eval and value_and_grad over a
/// model share.
template <class Model, class Fn> class ModelProgram {
  static constexpr std::size_t arity = batch_arity<Fn>();

public:
  /// With `gradients`, output 0 must be a scalar loss and the program also returns its
  /// gradient with respect to every parameter (outputs `grad:<parameter name>`).
  /// `amp`: the forward is traced as compile_step's mixed precision computes it.
  ModelProgram(Model& model, Fn fn, std::vector<std::string> batch_names, bool gradients,
               AmpMode amp = AmpMode::off)
      : model_(model), fn_(std::move(fn)),
        batch_names_(default_batch_names(std::move(batch_names), arity)), amp_(amp) {
    NamedParameters named = named_parameters(model_);
    names_ = std::move(named.names);
    params_ = named.values();
    if (!gradients) return;
    if (names_.empty())
      throw std::invalid_argument(
          "sinter: value_and_grad over a model needs at least one Parameter, and the model has "
          "none — declare its Parameters and sub-modules in BOOST_HANA_DEFINE_STRUCT");
    autodiff_ = AutodiffOptions{names_, 0};
  }

  /// The program for a batch of these types, traced and compiled if they are new.
  const CompiledGraph& compile(std::span<const HostTensor> batch,
                               std::optional<std::source_location> where = std::nullopt) const {
    std::string key = signature_key(batch);
    if (auto it = compiled_.find(key); it != compiled_.end()) return *it->second;
    const auto started = std::chrono::steady_clock::now();
    Graph g = amp_forward(
        trace_with_model(model_, fn_, batch, batch_names_, std::make_index_sequence<arity>{}),
        amp_);
    const double traced_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    if (autodiff_ && (g.outputs().empty() || !g.type(g.outputs()[0].id).shape.empty()))
      throw std::invalid_argument(
          "sinter: value_and_grad needs a scalar loss as the function's (first) result, got " +
          (g.outputs().empty() ? std::string("none") : to_string(g.type(g.outputs()[0].id))) +
          " — reduce it, e.g. with mean(...)");
    auto program =
        std::make_unique<CompiledGraph>(std::move(g), autodiff_, default_device(), nullptr,
                                        traced_ms, autodiff_ ? "value_and_grad" : "eval");
    const CompiledGraph& compiled = *compiled_.emplace(key, std::move(program)).first->second;
    const CompiledGraph* programs[] = {&compiled};
    log_.compiled(log_.reason(batch, batch_names_), compiled_.size(), batch, programs, where);
    return compiled;
  }

  /// Every output of `program` (compile(batch)), run on the parameters' current values and
  /// `batch`.
  std::vector<HostTensor> run(const CompiledGraph& program,
                              std::span<const HostTensor> batch) const {
    std::vector<const HostTensor*> inputs(params_.begin(), params_.end());
    for (const HostTensor& t : batch)
      inputs.push_back(&t);
    std::vector<HostTensor> outputs(program.graph().outputs().size());
    program.run_into(inputs, outputs);
    return outputs;
  }

  std::size_t trace_count() const { return compiled_.size(); }
  const std::vector<std::string>& parameter_names() const { return names_; }

private:
  Model& model_;
  Fn fn_;
  std::vector<std::string> batch_names_;
  AmpMode amp_;
  std::optional<AutodiffOptions> autodiff_;
  std::vector<std::string> names_;
  std::vector<HostTensor*> params_;
  mutable std::map<std::string, std::unique_ptr<CompiledGraph>> compiled_; // by batch types
  mutable CompileLog log_;
};

} // namespace detail

/// `fn(model, batch...)` compiled without backward, reading the model's current weights at
/// every call: for evaluation and inference.
template <class Model, class Fn> class CompiledEval {
public:
  CompiledEval(Model& model, Fn fn, std::vector<std::string> batch_names)
      : program_(model, std::move(fn), std::move(batch_names), false) {}

  /// A recompile's line names the calling source line.
  template <class... H>
    requires(std::same_as<std::remove_cvref_t<H>, HostTensor> && ...)
  auto operator()(detail::CallSite first, H&&... rest) const {
    static_assert(sizeof...(H) + 1 == detail::batch_arity<Fn>(),
                  "sinter: pass one HostTensor per batch parameter");
    // Borrowed, not copied: the caller's tensors outlive the call, and a batch can be large.
    std::array<HostTensor, sizeof...(H) + 1> packed{HostTensor::borrow(first.tensor),
                                                    HostTensor::borrow(rest)...};
    return call(packed, first.where);
  }

  /// Output 0 (a HostTensor) of the function.
  HostTensor call(std::span<const HostTensor> batch,
                  std::source_location where = std::source_location::current()) const {
    return std::move(program_.run(program_.compile(batch, where), batch)[0]);
  }

  /// The compiled program for a batch of these types (compiles without running).
  const CompiledGraph& compile(std::span<const HostTensor> batch,
                               std::source_location where = std::source_location::current()) const {
    return program_.compile(batch, where);
  }
  /// Distinct batch types compiled so far.
  std::size_t trace_count() const { return program_.trace_count(); }

private:
  detail::ModelProgram<Model, Fn> program_;
};

/// `fn(model, batch...)` with its parameters as inputs and no optimizer: compiled once per
/// batch types and run with the model's current weights. The model must outlive it.
template <class Model, class Fn>
auto compile_eval(Model& model, Fn fn, std::vector<std::string> batch_names = {}) {
  return CompiledEval<Model, Fn>(model, std::move(fn), std::move(batch_names));
}

/// The loss of `loss(model, batch...)` and its gradient with respect to every Parameter of the
/// model, compiled once per batch types. Reads the parameters at every call; never changes them.
template <class Model, class LossFn> class CompiledGrad {
public:
  CompiledGrad(Model& model, LossFn fn, std::vector<std::string> batch_names,
               AmpMode amp = AmpMode::off)
      : program_(model, std::move(fn), std::move(batch_names), true, amp) {}

  /// A recompile's line names the calling source line.
  template <class... H>
    requires(std::same_as<std::remove_cvref_t<H>, HostTensor> && ...)
  GradResult operator()(detail::CallSite first, H&&... rest) const {
    static_assert(sizeof...(H) + 1 == detail::batch_arity<LossFn>(),
                  "sinter: pass one HostTensor per batch parameter");
    // Borrowed, not copied: the caller's tensors outlive the call, and a batch can be large.
    std::array<HostTensor, sizeof...(H) + 1> packed{HostTensor::borrow(first.tensor),
                                                    HostTensor::borrow(rest)...};
    return call(packed, first.where);
  }

  /// `value`: the loss; `aux`: the function's other results; `grads`: one gradient per
  /// parameter, named and ordered as for_each_parameter visits them.
  GradResult call(std::span<const HostTensor> batch,
                  std::source_location where = std::source_location::current()) const {
    const CompiledGraph& program = program_.compile(batch, where);
    return detail::split_gradients(program.graph(), program_.run(program, batch));
  }

  /// The compiled program for a batch of these types (compiles without running).
  const CompiledGraph& compile(std::span<const HostTensor> batch,
                               std::source_location where = std::source_location::current()) const {
    return program_.compile(batch, where);
  }
  /// Distinct batch types compiled so far.
  std::size_t trace_count() const { return program_.trace_count(); }

private:
  detail::ModelProgram<Model, LossFn> program_;
};

/// The loss `loss(model, batch...)` (a scalar; the function may return a std::tuple whose other
/// results come back as aux) and its gradient with respect to every Parameter of `model`, by
/// the names for_each_parameter and checkpoints use (`blocks.0.attn.qkv.weight`). Nothing is
/// updated. The model must outlive the result.
template <class Model, class LossFn>
  requires(!std::same_as<std::remove_cvref_t<LossFn>, GradOptions>)
auto value_and_grad(Model& model, LossFn loss, std::vector<std::string> batch_names = {}) {
  return CompiledGrad<Model, LossFn>(model, std::move(loss), std::move(batch_names));
}

/// Options of value_and_grad over a model.
struct ModelGradOptions {
  std::vector<std::string> batch_names;
  /// Mixed precision (amp::bf16, amp::fp16): the loss and gradients as compile_step with the
  /// same `amp` computes them (before its loss scaling), to compare them with f32's.
  AmpMode amp = AmpMode::off;
};

/// value_and_grad over a model with options: `{.batch_names = {...}, .amp = amp::bf16}`.
template <class Model, class LossFn>
  requires(!std::same_as<std::remove_cvref_t<LossFn>, GradOptions>)
auto value_and_grad(Model& model, LossFn loss, ModelGradOptions options) {
  return CompiledGrad<Model, LossFn>(model, std::move(loss), std::move(options.batch_names),
                                     options.amp);
}

} // namespace sinter
