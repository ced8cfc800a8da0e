// jit/train/train_step.cpp — builds, compiles and runs the update program; owns optimizer state
#include "jit/train/train_step.hpp"
#include "jit/runtime/profiler.hpp"

#include "jit/api.hpp"
#include "jit/backend/numerics_check.hpp"

#include "jit/backend/backends.hpp"
#include "jit/backend/context.hpp"
#include "jit/passes/passes.hpp"
#include "jit/pipeline/pipeline.hpp"
#include "jit/pipeline/prepare.hpp"
#include "jit/runtime/communicator.hpp"
#include "jit/runtime/phase_timer.hpp"
#include "jit/train/data_parallel.hpp"
#include "jit/train/step_stages.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace sinter {
namespace {

enum class Source { parameter, batch, scalar, state, grad_sum, frozen, rank, sift_uniforms };

struct Slot {
  Source source;
  std::size_t index = 0; ///< parameter, batch, scalar or grad-sum index
  std::string state;     ///< state key for Source::state
};

} // namespace

/// The in-step sifting counters kept in `state.sift.counters` (so checkpoints carry them).
enum SiftCounter : int64_t { draws, batches, epoch_batches, seen, kept, count };

struct TrainStep::Compiled {
  std::unique_ptr<CompiledGraph> step;    ///< the fused update, or the gradients (accumulation)
  std::unique_ptr<CompiledGraph> apply;   ///< accumulation only: the update from summed grads
  std::unique_ptr<CompiledGraph> delay;   ///< in-step sifting: the step on the whole batch
  std::optional<std::size_t> rows_output; ///< in-step sifting: the step's `sift.rows` output
  std::vector<Slot> step_inputs, apply_inputs, delay_inputs;
  mutable std::vector<HostTensor> step_outputs, apply_outputs, delay_outputs;
};

TrainStep::TrainStep(Tracer trace, std::vector<std::string> names,
                     std::vector<HostTensor*> parameters, TrainStepOptions options,
                     Context* context)
    : trace_(std::move(trace)), names_(std::move(names)), parameters_(std::move(parameters)),
      options_(std::move(options)), context_(context) {
  if (names_.size() != parameters_.size())
    throw std::invalid_argument("sinter: one name per parameter");
  if (!options_.communicator) options_.communicator = &world();
  if (options_.accumulate < 1)
    throw std::invalid_argument("sinter: accumulate must be >= 1, got " +
                                std::to_string(options_.accumulate));
  if (options_.zero < 0 || options_.zero > 2)
    throw std::invalid_argument("sinter: zero must be 0, 1 or 2, got " +
                                std::to_string(options_.zero));
  if (options_.check_every < 0)
    throw std::invalid_argument("sinter: check_every must be 0 or a number of updates, got " +
                                std::to_string(options_.check_every));
  if (options_.bucket_bytes < 1)
    throw std::invalid_argument("sinter: bucket_bytes must be positive, got " +
                                std::to_string(options_.bucket_bytes));
  int32_t rank = options_.communicator->rank();
  rank_ = HostTensor(DType::i32, {});
  std::memcpy(rank_.bytes().data(), &rank, sizeof rank);
  if (options_.amp == AmpMode::fp16 && !options_.update.loss_scaling)
    options_.update.loss_scaling = LossScaling{};
  if (options_.amp != AmpMode::fp16 && options_.update.loss_scaling)
    throw std::invalid_argument("sinter: loss scaling is for fp16 autocast only (amp is " +
                                std::string(amp_name(options_.amp)) +
                                "): drop loss_scaling or set amp to fp16");
  if (const auto& scaling = options_.update.loss_scaling) {
    if (!(scaling->initial > 0) || !(scaling->growth >= 1) || !(scaling->backoff > 0) ||
        !(scaling->backoff < 1) || scaling->growth_interval < 1)
      throw std::invalid_argument("sinter: loss scaling needs initial > 0, growth >= 1, 0 < "
                                  "backoff < 1 and growth_interval >= 1");
    for (const auto& [name, value] : loss_scaling_state(*scaling))
      state_.emplace(name, HostTensor::from_doubles(DType::f32, {}, {&value, 1}));
  }
  if (options_.sift) {
    check_sift_options(*options_.sift);
    if (options_.sift_rows < 0)
      throw std::invalid_argument("sinter: sift_rows must be 0 (from beta) or a number of rows, "
                                  "got " +
                                  std::to_string(options_.sift_rows));
    HostTensor history(DType::f32, {options_.sift->history});
    std::fill(history.bytes().begin(), history.bytes().end(), std::byte{0});
    state_.emplace("state.sift.history", std::move(history));
    double zero = 0;
    state_.emplace("state.sift.filled", HostTensor::from_doubles(DType::f32, {}, {&zero, 1}));
    std::vector<double> counters(SiftCounter::count, 0.0);
    state_.emplace("state.sift.counters",
                   HostTensor::from_doubles(DType::i64, {SiftCounter::count}, counters));
  }
  // Under ZeRO each rank keeps the state of its shard of every parameter.
  bool sharded = state_pieces() > 1;
  for (std::size_t i = 0; i < names_.size(); ++i)
    for (const std::string& st : state_names(options_.update.optimizer)) {
      Shape shape = parameters_[i]->shape();
      if (sharded) shape = {shard_elements(numel(shape), ranks())};
      HostTensor zeros(parameters_[i]->dtype(), shape);
      std::fill(zeros.bytes().begin(), zeros.bytes().end(), std::byte{0});
      state_.emplace("state." + st + "." + names_[i], std::move(zeros));
    }
}

TrainStep::~TrainStep() = default;

std::vector<std::pair<std::string, HostTensor*>> TrainStep::state() {
  std::vector<std::pair<std::string, HostTensor*>> out;
  for (auto& [name, tensor] : state_)
    if (!name.starts_with("state.low.")) out.emplace_back(name, &tensor);
  return out;
}

const CompiledGraph& TrainStep::program() const {
  if (!last_) throw std::logic_error("sinter: the step has not been compiled yet (call it once)");
  return last_->apply ? *last_->apply : *last_->step;
}

std::vector<const CompiledGraph*> TrainStep::programs() const {
  if (!last_) throw std::logic_error("sinter: the step has not been compiled yet (call it once)");
  std::vector<const CompiledGraph*> out{last_->step.get()};
  if (last_->apply) out.push_back(last_->apply.get());
  return out;
}

Graph TrainStep::read_low_copies(const Graph& forward) {
  std::map<ValueId, std::size_t> parameter_of;
  for (std::size_t i = 0; i < names_.size(); ++i)
    parameter_of[input_named(forward, names_[i])] = i;
  return rebuild(forward, [&](const Node& n, std::span<const Value> operands) -> Value {
    if (n.op != OpId::cast || !(n.attrs.dtype == DType::bf16 || n.attrs.dtype == DType::f16))
      return {};
    auto it = parameter_of.find(n.inputs[0]);
    if (it == parameter_of.end()) return {};
    std::string state = "state.low." + names_[it->second];
    if (!state_.contains(state)) {
      low_copies_.push_back(WorkingCopy{it->second, n.attrs.dtype, state});
      parameter_stamps_.assign(parameters_.size(), 0); // made below, before the first run
      state_.emplace(state, HostTensor(n.attrs.dtype, parameters_[it->second]->shape()));
    }
    return input_once(*operands[0].graph, state, n.type);
  });
}

void TrainStep::refresh_low_copies() {
  for (const WorkingCopy& copy : low_copies_) {
    const HostTensor& p = *parameters_[copy.parameter];
    if (p.stamp() == parameter_stamps_[copy.parameter]) continue;
    HostTensor& low = state_.at(copy.state);
    for (int64_t k = 0; k < p.size(); ++k)
      low.set(k, p.at(k));
    parameter_stamps_[copy.parameter] = p.stamp();
  }
}

int64_t TrainStep::skipped_updates() const {
  auto it = state_.find("state.amp.skipped");
  return it == state_.end() ? 0 : static_cast<int64_t>(it->second.at(0));
}

double TrainStep::loss_scale() const {
  auto it = state_.find("state.amp.scale");
  return it == state_.end() ? 0.0 : it->second.at(0);
}

std::string_view amp_name(AmpMode mode) {
  switch (mode) {
  case AmpMode::off: return "off";
  case AmpMode::bf16: return "bf16";
  case AmpMode::fp16: return "fp16";
  }
  return "?";
}

AmpMode amp_from_name(std::string_view name) {
  for (AmpMode m : {AmpMode::off, AmpMode::bf16, AmpMode::fp16})
    if (amp_name(m) == name) return m;
  throw std::invalid_argument("sinter: unknown amp mode '" + std::string(name) +
                              "' (use off, bf16 or fp16)");
}

std::vector<HostTensor> TrainStep::scalar_inputs(double lr) const {
  // In scalar_names() order: lr, 1/(k·ranks), and t (the 1-based update count).
  // Gradients arrive summed over k micro-batches and, data parallel, over the ranks.
  double summed = static_cast<double>(options_.accumulate * ranks());
  std::vector<double> values{lr, 1.0 / summed, static_cast<double>(steps_ + 1)};
  std::vector<HostTensor> out;
  for (double v : values)
    out.push_back(HostTensor::from_doubles(DType::f64, {}, {&v, 1}));
  return out;
}

bool TrainStep::split_update() const { return options_.accumulate > 1; }

std::vector<std::string> TrainStep::parameter_checksums() const {
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < names_.size(); ++i) {
    uint64_t hash = 1469598103934665603ull; // FNV-1a over the bytes
    for (std::byte b : parameters_[i]->bytes())
      hash = (hash ^ static_cast<uint64_t>(b)) * 1099511628211ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
    lines.push_back("the values of parameter " + names_[i] + " (checksum " + hex);
  }
  return lines;
}

int TrainStep::ranks() const { return options_.communicator->size(); }

int TrainStep::state_pieces() const { return options_.zero > 0 ? ranks() : 1; }

int TrainStep::state_pieces(const std::string& name) const {
  return name.starts_with("state.amp.") || name.starts_with("state.sift.") ? 1 : state_pieces();
}

int64_t TrainStep::sift_rows_for(int64_t rows) const {
  int64_t k = options_.sift_rows > 0
                  ? options_.sift_rows
                  : std::max<int64_t>(
                        1, std::llround(static_cast<double>(rows) / (1.0 + options_.sift->beta)));
  if (k > rows)
    throw std::invalid_argument("sinter: in-step sifting trains on " + std::to_string(k) +
                                " rows of each batch, but the batch has " + std::to_string(rows) +
                                ": lower sift_rows or raise the batch size");
  return k;
}

bool TrainStep::sift_delaying() const {
  if (!options_.sift) return false;
  const HostTensor& counters = state_.at("state.sift.counters");
  double done =
      counters.at(options_.sift->repeat_delay ? SiftCounter::epoch_batches : SiftCounter::batches);
  return done < static_cast<double>(options_.sift->delay);
}

void TrainStep::start_sift_epoch() {
  if (!options_.sift)
    throw std::logic_error("sinter: start_sift_epoch on a step without in-step sifting");
  state_.at("state.sift.counters").set(SiftCounter::epoch_batches, 0.0);
}

SiftCounts TrainStep::sift_counts() const {
  if (!options_.sift) return {};
  const HostTensor& counters = state_.at("state.sift.counters");
  return SiftCounts{static_cast<int64_t>(counters.at(SiftCounter::seen)),
                    static_cast<int64_t>(counters.at(SiftCounter::kept)), sift_delaying()};
}

const HostTensor& TrainStep::sift_rows() const {
  if (!sift_rows_)
    throw std::logic_error("sinter: sift_rows() before a step with in-step sifting has run");
  return *sift_rows_;
}

Shape TrainStep::state_shape(const std::string& name) const {
  for (std::size_t i = 0; i < names_.size(); ++i)
    for (const std::string& st : state_names(options_.update.optimizer))
      if (name == "state." + st + "." + names_[i]) return parameters_[i]->shape();
  return state_.at(name).shape();
}

std::string TrainStep::batch_key(std::span<const HostTensor> batch) {
  std::string key;
  for (const HostTensor& t : batch)
    key += to_string(TensorType{t.dtype(), t.shape()}) + ";";
  return key;
}

TrainStep::Built TrainStep::build(std::span<const HostTensor> batch, Sifting sifting,
                                  CompileRun& run) {
  Built built;
  Graph graph = run.run({"trace", [&](Graph) { return traced(batch, sifting, built); }}, Graph());
  const StepGraphFacts facts{names_, built.batch_names, ranks()};
  // The step's features, each contributing its stages (the order is jit/pipeline/stage.cpp's).
  std::vector<Stage> stages;
  if (sifting != Sifting::none)
    stages.push_back(sift_stage(
        *options_.sift, batch, facts, sifting == Sifting::select,
        sifting == Sifting::select ? sift_rows_for(batch.front().shape().at(0)) : 0, trace_));
  if (options_.amp != AmpMode::off) {
    stages.push_back(autocast_stage(options_.amp == AmpMode::bf16 ? DType::bf16 : DType::f16));
    if (options_.update.loss_scaling) stages.push_back(loss_scale_stage());
    stages.push_back({"working-copies", [this](Graph g) { return read_low_copies(g); }});
  }
  stages.push_back(step_autodiff_stage(facts, low_copies_));
  if (options_.amp != AmpMode::off) stages.push_back(merge_gradients_stage(facts, low_copies_));
  if (ranks() > 1) stages.push_back(loss_all_reduce_stage(ranks()));
  DataParallelLayout layout{ranks(), options_.zero, options_.bucket_bytes};
  stages.push_back(update_stage(facts, low_copies_, options_.update, layout, !split_update()));
  built.step = Pipeline(std::move(stages)).run(std::move(graph), run);
  built.later = Pipeline::standard(std::nullopt);
  if (sifting == Sifting::select)
    built.later = std::move(built.later).with(share_taken_rows_stage());
  if (split_update()) {
    std::vector<TensorType> types;
    for (const HostTensor* p : parameters_)
      types.push_back(TensorType{p->dtype(), p->shape()});
    built.apply = update_program(facts, low_copies_, types, options_.update, layout);
  }
  return built;
}

Graph TrainStep::traced(std::span<const HostTensor> batch, Sifting sifting, Built& built) {
  Graph forward = trace_(batch);
  if (forward.outputs().empty())
    throw std::invalid_argument("sinter: the loss function returned nothing");
  if (sifting == Sifting::none && !forward.type(forward.outputs()[0].id).shape.empty())
    throw std::invalid_argument("sinter: the loss (output 0) must be a scalar, got " +
                                to_string(forward.type(forward.outputs()[0].id)));
  for (std::size_t i = 0; i < names_.size(); ++i) {
    const TensorType& t = forward.type(input_named(forward, names_[i]));
    if (t.dtype != parameters_[i]->dtype() || t.shape != parameters_[i]->shape())
      throw std::invalid_argument(
          "sinter: parameter '" + names_[i] + "' holds " +
          to_string(TensorType{parameters_[i]->dtype(), parameters_[i]->shape()}) +
          " but the model uses it as " + to_string(t));
  }
  auto is_frozen = [&](const std::string& name) {
    return std::any_of(options_.frozen.begin(), options_.frozen.end(),
                       [&](const auto& f) { return f.first == name; });
  };
  for (const auto& [name, tensor] : options_.frozen) {
    auto in = std::find_if(forward.inputs().begin(), forward.inputs().end(),
                           [&](const NamedValue& v) { return v.name == name; });
    if (in == forward.inputs().end()) continue; // traced but unused: nothing to feed
    const TensorType& t = forward.type(in->id);
    if (t.dtype != tensor->dtype() || t.shape != tensor->shape())
      throw std::invalid_argument("sinter: frozen input '" + name + "' holds " +
                                  to_string(TensorType{tensor->dtype(), tensor->shape()}) +
                                  " but the step uses it as " + to_string(t));
  }
  // Batch inputs: every input that is neither a parameter nor frozen, in graph order (= call
  // order).
  for (const NamedValue& in : forward.inputs())
    if (std::find(names_.begin(), names_.end(), in.name) == names_.end() && !is_frozen(in.name))
      built.batch_names.push_back(in.name);
  if (batch.size() != built.batch_names.size())
    throw std::invalid_argument("sinter: the step takes " +
                                std::to_string(built.batch_names.size()) + " batch inputs, got " +
                                std::to_string(batch.size()));
  for (std::size_t j = 0; j < batch.size(); ++j) {
    const TensorType& want = forward.type(input_named(forward, built.batch_names[j]));
    if (batch[j].dtype() != want.dtype || batch[j].shape() != want.shape)
      throw std::invalid_argument("sinter: batch input '" + built.batch_names[j] + "' expects " +
                                  to_string(want) + ", got " +
                                  to_string(TensorType{batch[j].dtype(), batch[j].shape()}));
  }
  return forward;
}

Graph TrainStep::plan_graph(std::span<const HostTensor> batch, CompileRun& run) {
  Built built = build(batch, options_.sift ? Sifting::select : Sifting::none, run);
  return built.later.run(std::move(built.step), run);
}

Graph TrainStep::plan_graph(std::span<const HostTensor> batch) {
  CompileRun run("train step", true);
  return plan_graph(batch, run);
}

TrainStep::ResidentBytes TrainStep::resident_bytes() const {
  ResidentBytes bytes;
  for (const HostTensor* p : parameters_)
    bytes.parameters += static_cast<int64_t>(p->byte_size());
  for (const auto& [name, tensor] : state_)
    bytes.optimizer_state += static_cast<int64_t>(tensor.byte_size());
  for (const auto& [name, tensor] : options_.frozen)
    bytes.frozen += static_cast<int64_t>(tensor->byte_size());
  return bytes;
}

std::vector<HostTensor> resized_batch(std::span<const HostTensor> example, int64_t batch) {
  std::vector<HostTensor> out;
  for (const HostTensor& t : example) {
    if (t.shape().empty())
      throw std::invalid_argument("sinter: a batch input is a scalar; the batch size is dim 0 of "
                                  "every batch input, so each must have at least one dim");
    Shape shape = t.shape();
    shape[0] = batch;
    out.emplace_back(t.dtype(), shape); // never written: planning reads only types
  }
  return out;
}

std::string MaxBatch::line() const {
  return "max_batch=" + std::to_string(batch) + " peak_bytes=" + std::to_string(peak_bytes) +
         " next_peak_bytes=" + std::to_string(next_peak_bytes) +
         " budget_bytes=" + std::to_string(budget_bytes);
}

StepMemory TrainStep::plan_memory(std::span<const HostTensor> batch) {
  CompileRun run("train step", true);
  return plan_for(plan_graph(batch, run), run);
}

StepMemory TrainStep::plan_for(const Graph& optimized, CompileRun& run) const {
  const auto& inputs = optimized.inputs();
  // Parameters and optimizer state are carried, frozen inputs resident: one copy each.
  auto single = std::make_unique<bool[]>(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string& n = inputs[i].name;
    single[i] = std::find(names_.begin(), names_.end(), n) != names_.end() ||
                n.starts_with("state.") ||
                std::any_of(options_.frozen.begin(), options_.frozen.end(),
                            [&](const auto& f) { return f.first == n; });
  }
  Device device = default_device();
  Prepared prepared = prepare_for(optimized, device, run);
  run.finish(device.name());
  return backend_entry(device.backend)
      .plan_memory(prepared, device, std::span<const bool>(single.get(), inputs.size()));
}

MaxBatch TrainStep::max_batch(std::span<const HostTensor> example, int64_t budget_bytes) {
  if (example.empty())
    throw std::invalid_argument("sinter: max_batch needs an example batch (one tensor per batch "
                                "input; dim 0 is the batch size)");
  MaxBatch r;
  r.budget_bytes = budget_bytes;
  std::map<int64_t, int64_t> peaks;
  auto peak = [&](int64_t b) {
    if (auto it = peaks.find(b); it != peaks.end()) return it->second;
    ++r.plans;
    return peaks[b] = plan_memory(resized_batch(example, b)).total();
  };
  constexpr int64_t most = int64_t{1} << 24;
  int64_t lo = 1, plo = peak(1), hi = 0, phi = 0; // peak(lo) fits; peak(hi) does not (0: unknown)
  if (plo > budget_bytes) {
    r.next_peak_bytes = plo;
    return r;
  }
  auto probe = [&](int64_t b) {
    int64_t p = peak(b);
    if (p <= budget_bytes) {
      lo = b;
      plo = p;
    } else {
      hi = b;
      phi = p;
    }
  };
  probe(8);
  const int64_t p1 = peaks.at(1);
  // The peak grows almost linearly with the batch: extrapolate to the budget, then settle the
  // bracket by interpolation, probing either side of each estimate (bisection if that stalls).
  for (int rounds = 0; hi == 0 || hi - lo > 1; ++rounds) {
    if (hi == 0) {
      double slope = lo > 1 ? static_cast<double>(plo - p1) / static_cast<double>(lo - 1) : 0;
      double estimate =
          slope > 0 ? static_cast<double>(lo) + static_cast<double>(budget_bytes - plo) / slope
                    : 2.0 * static_cast<double>(lo);
      int64_t next = std::max(lo + 1, static_cast<int64_t>(estimate * 1.01) + 1);
      if (lo >= most)
        throw std::invalid_argument("sinter: max_batch: even a batch of " + std::to_string(most) +
                                    " fits the budget; the budget is too large to search");
      probe(std::min(next, most));
      continue;
    }
    int64_t next;
    if (rounds < 12) {
      double t = static_cast<double>(budget_bytes - plo) / static_cast<double>(phi - plo);
      next = lo + static_cast<int64_t>(t * static_cast<double>(hi - lo));
    } else {
      next = lo + (hi - lo) / 2;
    }
    next = std::clamp(next, lo + 1, hi - 1);
    probe(next);
    if (lo == next && next + 1 < hi)
      probe(next + 1);
    else if (hi == next && next - 1 > lo)
      probe(next - 1);
  }
  r.batch = lo;
  r.peak_bytes = plo;
  r.next_peak_bytes = phi;
  return r;
}

[[noreturn]] void TrainStep::explain_out_of_memory(std::span<const HostTensor> batch,
                                                   const StepMemory& planned, int64_t available,
                                                   const std::string& cause) {
  Device device = default_device();
  std::string types;
  for (const HostTensor& t : batch)
    types += (types.empty() ? "" : ", ") + to_string(TensorType{t.dtype(), t.shape()});
  std::string message =
      "sinter: out of memory on " + device.name() + " for the step on batch " + types + ": " +
      cause + "\n  planned peak " + format_bytes(planned.total()) + " (arena " +
      format_bytes(planned.arena) + ", inputs " + format_bytes(planned.inputs) + ", outputs " +
      format_bytes(planned.outputs) + ", workspace " + format_bytes(planned.workspace) +
      "); free " + format_bytes(available) + "\n  largest buffers:";
  for (const PlannedBuffer& b : planned.largest)
    message += "\n    " + format_bytes(b.bytes) + "  " + b.what;
  try {
    MaxBatch fit = max_batch(batch, available);
    message +=
        "\n  largest batch that fits: " + std::to_string(fit.batch) + " (" + fit.line() + ")" +
        (fit.batch > 0
             ? " — pass a batch of at most " + std::to_string(fit.batch) +
                   " (recipes: --batch-size " + std::to_string(fit.batch) + " or --batch-size max)"
             : " — not even one example fits: use a smaller model or AMP");
  } catch (const std::exception& e) {
    message += std::string("\n  (no batch size could be planned: ") + e.what() + ")";
  }
  throw OutOfMemory(message, planned.total(), available);
}

const TrainStep::Compiled& TrainStep::compiled_for(std::span<const HostTensor> batch) {
  std::string key = batch_key(batch);
  if (auto it = by_batch_types_.find(key); it != by_batch_types_.end()) return *it->second;

  CompileRun run(split_update() ? "train step (gradients)" : "train step");
  Built built = build(batch, options_.sift ? Sifting::select : Sifting::none, run);
  // In-step sifting compiles the delay's whole-batch step up front, so entering or leaving
  // the delay never compiles anything.
  std::optional<Built> delay;
  CompileRun delay_run("train step (sifting delay)");
  if (options_.sift && (options_.sift->delay > 0)) delay = build(batch, Sifting::delay, delay_run);
  const std::vector<std::string>& batch_names = built.batch_names;
  if (options_.communicator->size() > 1) {
    // Data parallel: every rank must train the same model from the same values on shards of
    // the same types, or the averaged gradients mean nothing. Checked once per batch type.
    std::vector<std::string> facts;
    for (std::size_t i = 0; i < names_.size(); ++i)
      facts.push_back("parameter " + names_[i] + " " +
                      to_string(TensorType{parameters_[i]->dtype(), parameters_[i]->shape()}));
    for (std::size_t j = 0; j < batch.size(); ++j)
      facts.push_back("batch input " + batch_names[j] + " " +
                      to_string(TensorType{batch[j].dtype(), batch[j].shape()}));
    facts.push_back("accumulate " + std::to_string(options_.accumulate) + ", amp " +
                    std::string(amp_name(options_.amp)) + ", zero " +
                    std::to_string(options_.zero) + ", gradient buckets of " +
                    std::to_string(options_.bucket_bytes) + " bytes");
    for (const std::string& line : parameter_checksums())
      facts.push_back(line + "; start every rank from the same Init seed or checkpoint)");
    check_ranks_agree(*options_.communicator, facts,
                      "the data-parallel step (parameters, their values, batch types, options)");
  }
  auto compiled = std::make_unique<Compiled>();
  Device backend = default_device();
  if (std::optional<int64_t> limit = memory_limit_from_environment()) {
    CompileRun planning("train step", true);
    StepMemory planned = plan_for(built.later.run(Graph(built.step), planning), planning);
    if (planned.total() > *limit)
      explain_out_of_memory(batch, planned, *limit,
                            "the planned peak is over SINTER_MEMORY_LIMIT=" +
                                std::to_string(*limit));
  }
  try {
    compiled->step =
        std::make_unique<CompiledGraph>(std::move(built.step), built.later, run, backend, context_);
    compiled->step->set_communicator(*options_.communicator);
    compiled->step->set_label(run.program());
    if (delay) {
      compiled->delay = std::make_unique<CompiledGraph>(std::move(delay->step), delay->later,
                                                        delay_run, backend, context_);
      compiled->delay->set_communicator(*options_.communicator);
      compiled->delay->set_label(delay_run.program());
    }
    if (split_update()) {
      CompileRun apply_run("train step (update)");
      apply_run.given("update", built.apply, 0); // built with the step's graph
      compiled->apply = std::make_unique<CompiledGraph>(
          std::move(built.apply), Pipeline::standard(std::nullopt), apply_run, backend, context_);
      compiled->apply->set_communicator(*options_.communicator);
      compiled->apply->set_label(apply_run.program());
    }
  } catch (const OutOfMemory& e) {
    explain_out_of_memory(batch, plan_memory(batch), e.available_bytes(), e.what());
  } catch (const std::bad_alloc&) {
    explain_out_of_memory(batch, plan_memory(batch),
                          backend_entry(backend.backend).free_memory(backend),
                          "a host allocation failed");
  }

  auto wire = [&](const CompiledGraph& c, std::vector<Slot>& slots, std::vector<HostTensor>& outs) {
    auto scalars = scalar_names();
    for (const NamedValue& in : c.graph().inputs()) {
      const std::string& n = in.name;
      if (auto p = std::find(names_.begin(), names_.end(), n); p != names_.end())
        slots.push_back({Source::parameter, static_cast<std::size_t>(p - names_.begin()), ""});
      else if (auto b = std::find(batch_names.begin(), batch_names.end(), n);
               b != batch_names.end())
        slots.push_back({Source::batch, static_cast<std::size_t>(b - batch_names.begin()), ""});
      else if (auto s = std::find(scalars.begin(), scalars.end(), n); s != scalars.end())
        slots.push_back({Source::scalar, static_cast<std::size_t>(s - scalars.begin()), ""});
      else if (n.starts_with("state."))
        slots.push_back({Source::state, 0, n});
      else if (auto f = std::find_if(options_.frozen.begin(), options_.frozen.end(),
                                     [&](const auto& fz) { return fz.first == n; });
               f != options_.frozen.end())
        slots.push_back(
            {Source::frozen, static_cast<std::size_t>(f - options_.frozen.begin()), ""});
      else if (n == rank_input_name())
        slots.push_back({Source::rank, 0, ""});
      else if (n == "sift.uniforms")
        slots.push_back({Source::sift_uniforms, 0, ""});
      else if (n.starts_with("grad."))
        slots.push_back({Source::grad_sum,
                         static_cast<std::size_t>(
                             std::find(names_.begin(), names_.end(), n.substr(5)) - names_.begin()),
                         ""});
      else
        throw std::logic_error("sinter: unexpected step input " + n);
    }
    for (const NamedValue& out : c.graph().outputs())
      outs.emplace_back(c.graph().type(out.id).dtype, c.graph().type(out.id).shape);
  };
  wire(*compiled->step, compiled->step_inputs, compiled->step_outputs);
  if (compiled->apply) wire(*compiled->apply, compiled->apply_inputs, compiled->apply_outputs);
  if (compiled->delay) wire(*compiled->delay, compiled->delay_inputs, compiled->delay_outputs);
  if (options_.sift) {
    const auto& outputs = compiled->step->graph().outputs();
    for (std::size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i].name == "sift.rows") compiled->rows_output = i;
  }
  // Parameters and optimizer state feed the next update: on a GPU they stay there.
  auto carry = [](CompiledGraph& program) {
    const Graph& g = program.graph();
    std::vector<std::pair<std::size_t, std::size_t>> pairs;
    for (std::size_t out = 0; out < g.outputs().size(); ++out) {
      const std::string& name = g.outputs()[out].name;
      if (!name.starts_with("new.")) continue;
      for (std::size_t in = 0; in < g.inputs().size(); ++in)
        if (g.inputs()[in].name == name.substr(4)) pairs.emplace_back(in, out);
    }
    program.set_carried(pairs);
  };
  // Frozen inputs (a teacher) are read by every step and never written: on a GPU they stay.
  auto keep_frozen = [](CompiledGraph& program, const std::vector<Slot>& slots) {
    std::vector<std::size_t> resident;
    for (std::size_t in = 0; in < slots.size(); ++in)
      if (slots[in].source == Source::frozen) resident.push_back(in);
    program.set_resident(resident);
  };
  keep_frozen(*compiled->step, compiled->step_inputs);
  carry(*compiled->step);
  if (compiled->apply) carry(*compiled->apply);
  if (compiled->delay) {
    keep_frozen(*compiled->delay, compiled->delay_inputs);
    carry(*compiled->delay);
  }
  return *by_batch_types_.emplace(key, std::move(compiled)).first->second;
}

LossHandle TrainStep::operator()(std::span<const HostTensor> batch, double lr) {
  if (take_interrupt())
    throw Interrupted("sinter: interrupted before step " + std::to_string(steps_ + 1) +
                      ": the model holds the weights after step " + std::to_string(steps_) +
                      ", and calling the step again goes on from there");
  bool first_run = !by_batch_types_.contains(batch_key(batch));
  const Compiled& c = compiled_for(batch);
  last_ = &c;
  profile::StepScope profiled_step; // after any compile: that is not the step's time
  // The first run of a program includes uploads and, on a GPU, graph capture.
  std::optional<PhaseTimer> phase;
  if (first_run) phase.emplace("first run");
  refresh_low_copies();
  std::vector<HostTensor> scalars = scalar_inputs(lr);
  auto gather = [&](const std::vector<Slot>& slots) {
    std::vector<const HostTensor*> ptrs;
    for (const Slot& s : slots) {
      switch (s.source) {
      case Source::parameter: ptrs.push_back(parameters_[s.index]); break;
      case Source::batch: ptrs.push_back(&batch[s.index]); break;
      case Source::scalar: ptrs.push_back(&scalars[s.index]); break;
      case Source::state: ptrs.push_back(&state_.at(s.state)); break;
      case Source::grad_sum: ptrs.push_back(&grad_sums_[s.index]); break;
      case Source::frozen: ptrs.push_back(options_.frozen[s.index].second); break;
      case Source::rank: ptrs.push_back(&rank_); break;
      case Source::sift_uniforms: ptrs.push_back(&sift_uniforms_); break;
      }
    }
    return ptrs;
  };
  auto run = [&](const CompiledGraph& program, const std::vector<Slot>& slots,
                 std::vector<HostTensor>& outs) {
    try {
      program.run_into(gather(slots), outs);
    } catch (const NumericsError& e) { // name the step it happened in
      std::string what = e.what();
      const std::string tag = "non-finite value";
      if (std::size_t at = what.find(tag); at != std::string::npos)
        what.insert(at + tag.size(), " in step " + std::to_string(steps_ + 1));
      throw NumericsError(what);
    }
  };
  // Outputs named new.* replace what they update (double buffering: the old buffers are the
  // next step's outputs).
  auto take_updates = [&](const CompiledGraph& program, std::vector<HostTensor>& outs) {
    const auto& named = program.graph().outputs();
    for (std::size_t i = 0; i < named.size(); ++i) {
      const std::string& n = named[i].name;
      if (n.starts_with("new.state."))
        std::swap(state_.at(n.substr(4)), outs[i]);
      else if (n.starts_with("new."))
        std::swap(
            *parameters_[std::find(names_.begin(), names_.end(), n.substr(4)) - names_.begin()],
            outs[i]);
    }
  };

  auto note_stamps = [&] {
    if (!low_copies_.empty())
      for (std::size_t i = 0; i < parameters_.size(); ++i)
        parameter_stamps_[i] = parameters_[i]->stamp();
  };
  // In-step sifting: the delay runs the whole-batch step; either way every row gets a draw
  // (rank r takes the draws after ranks 0..r-1), so the draws never depend on the delay.
  const bool delaying = sift_delaying();
  const CompiledGraph& step_program = delaying ? *c.delay : *c.step;
  const std::vector<Slot>& step_inputs = delaying ? c.delay_inputs : c.step_inputs;
  std::vector<HostTensor>& step_outputs = delaying ? c.delay_outputs : c.step_outputs;
  int64_t rows = 0;
  if (options_.sift) {
    rows = batch.front().shape().at(0);
    HostTensor& counters = state_.at("state.sift.counters");
    auto first = static_cast<uint64_t>(counters.at(SiftCounter::draws)) +
                 static_cast<uint64_t>(options_.communicator->rank() * rows);
    if (sift_uniforms_.shape() != Shape{rows}) sift_uniforms_ = HostTensor(DType::f32, {rows});
    auto* u = reinterpret_cast<float*>(sift_uniforms_.bytes().data());
    for (int64_t i = 0; i < rows; ++i)
      u[i] = sift_uniform(options_.sift->seed, first + static_cast<uint64_t>(i));
  }
  options_.communicator->set_step(steps_ + 1); // named by a collective that fails
  try {
    run(step_program, step_inputs, step_outputs);
  } catch (const OutOfMemory& e) {
    // The first run allocates what compiling left (workspace, graph capture): explain it once.
    if (!first_run || e.planned_bytes() != 0) throw;
    explain_out_of_memory(batch, plan_memory(batch), e.available_bytes(), e.what());
  }
  // Moved, not copied: on a GPU the loss is still deferred, so the step runs on while the
  // caller prepares the next batch; reading it waits for the step.
  auto loss = std::make_shared<HostTensor>(std::move(step_outputs[0]));
  if (options_.sift) {
    if (!delaying) {
      sift_rows_ = std::make_shared<HostTensor>(std::move(step_outputs[*c.rows_output]));
    } else { // the delay trains on every row
      if (!every_row_ || every_row_->size() != rows) {
        std::vector<double> all(static_cast<std::size_t>(rows));
        for (int64_t i = 0; i < rows; ++i)
          all[static_cast<std::size_t>(i)] = static_cast<double>(i);
        every_row_ =
            std::make_shared<HostTensor>(HostTensor::from_doubles(DType::i32, {rows}, all));
      }
      sift_rows_ = every_row_;
    }
    HostTensor& counters = state_.at("state.sift.counters");
    auto bump = [&](SiftCounter which, int64_t by) {
      counters.set(which, counters.at(which) + static_cast<double>(by));
    };
    bump(SiftCounter::draws, rows * ranks());
    bump(SiftCounter::batches, 1);
    bump(SiftCounter::epoch_batches, 1);
    bump(SiftCounter::seen, rows);
    bump(SiftCounter::kept, sift_rows_->size());
  }
  auto check_agreement = [&] {
    if (options_.check_every <= 0 || ranks() == 1 || steps_ % options_.check_every != 0) return;
    std::vector<std::string> lines = parameter_checksums();
    for (std::string& line : lines)
      line += ")";
    check_ranks_agree(*options_.communicator, lines,
                      "the parameters after update " + std::to_string(steps_) +
                          " (they drifted apart: a rank computed something else; the check runs "
                          "every " +
                          std::to_string(options_.check_every) + " updates)");
  };
  if (!c.apply) {
    take_updates(step_program, step_outputs);
    note_stamps();
    ++steps_;
    check_agreement();
    return LossHandle(loss);
  }
  // Accumulation: sum this micro-batch's gradients; update on the k-th.
  take_updates(step_program, step_outputs); // in-step sifting's loss history
  const auto& named = step_program.graph().outputs();
  if (grad_sums_.empty())
    for (HostTensor* p : parameters_) {
      HostTensor zeros(p->dtype(), p->shape());
      std::fill(zeros.bytes().begin(), zeros.bytes().end(), std::byte{0});
      grad_sums_.push_back(std::move(zeros));
    }
  for (std::size_t i = 1; i < named.size(); ++i) {
    if (!named[i].name.starts_with("grad:")) continue;
    std::size_t p = static_cast<std::size_t>(
        std::find(names_.begin(), names_.end(), named[i].name.substr(5)) - names_.begin());
    HostTensor& sum = grad_sums_[p];
    const HostTensor& g = step_outputs[i];
    if (sum.dtype() == DType::f32) {
      auto* s = reinterpret_cast<float*>(sum.bytes().data());
      const auto* x = reinterpret_cast<const float*>(g.bytes().data());
      for (int64_t k = 0; k < sum.size(); ++k)
        s[k] += x[k];
    } else {
      for (int64_t k = 0; k < sum.size(); ++k)
        sum.set(k, sum.at(k) + g.at(k));
    }
  }
  if (++micro_steps_ % options_.accumulate == 0) {
    // Data parallel: the update program reduces the summed gradients over the ranks
    // (grad_scale divides by k·ranks).
    run(*c.apply, c.apply_inputs, c.apply_outputs);
    take_updates(*c.apply, c.apply_outputs);
    note_stamps();
    for (HostTensor& sum : grad_sums_)
      std::fill(sum.bytes().begin(), sum.bytes().end(), std::byte{0});
    ++steps_;
    check_agreement();
  }
  return LossHandle(loss);
}

} // namespace sinter
