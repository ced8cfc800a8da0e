// jit/train/train_step.cpp — a training step: builds its programs from its features' stages,
// compiles them per batch type, and runs them on its parameters and carried state
#include "jit/train/train_step.hpp"

#include "jit/api.hpp"
#include "jit/backend/backends.hpp"
#include "jit/dist/communicator.hpp"
#include "jit/dist/data_parallel.hpp"
#include "jit/pipeline/prepare.hpp"
#include "jit/profile/numerics_check.hpp"
#include "jit/profile/phase_timer.hpp"
#include "jit/profile/profiler.hpp"
#include "jit/settings.hpp"
#include "jit/train/step_program.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace sinter {

/// The programs of one batch type.
struct TrainStep::Compiled {
  StepProgram step;                       ///< the fused update, or the gradients (accumulation)
  StepProgram apply;                      ///< accumulation only: the update from summed gradients
  StepProgram delay;                      ///< in-step sifting: the step on the whole batch
  std::optional<std::size_t> rows_output; ///< in-step sifting: the step's drawn rows
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
  if (const auto& scaling = options_.update.loss_scaling)
    if (!(scaling->initial > 0) || !(scaling->growth >= 1) || !(scaling->backoff > 0) ||
        !(scaling->backoff < 1) || scaling->growth_interval < 1)
      throw std::invalid_argument("sinter: loss scaling needs initial > 0, growth >= 1, 0 < "
                                  "backoff < 1 and growth_interval >= 1");
  if (options_.sift) {
    check_sift_options(*options_.sift);
    if (options_.sift_rows < 0)
      throw std::invalid_argument("sinter: sift_rows must be 0 (from beta) or a number of rows, "
                                  "got " +
                                  std::to_string(options_.sift_rows));
  }
  for (const auto& [name, tensor] : options_.frozen)
    frozen_names_.push_back(name);
  state_ = std::make_unique<StepState>(names_, parameters_, options_.update, options_.sift,
                                       state_pieces());
}

TrainStep::~TrainStep() = default;

std::vector<std::pair<std::string, HostTensor*>> TrainStep::state() {
  return state_->checkpointed();
}

const CompiledGraph& TrainStep::program() const {
  if (!last_) throw std::logic_error("sinter: the step has not been compiled yet (call it once)");
  return last_->apply ? *last_->apply.program : *last_->step.program;
}

std::vector<const CompiledGraph*> TrainStep::programs() const {
  if (!last_) throw std::logic_error("sinter: the step has not been compiled yet (call it once)");
  std::vector<const CompiledGraph*> out{last_->step.program.get()};
  if (last_->apply) out.push_back(last_->apply.program.get());
  return out;
}

int64_t TrainStep::skipped_updates() const { return state_->skipped_updates(); }
double TrainStep::loss_scale() const { return state_->loss_scale(); }
void TrainStep::start_sift_epoch() { state_->start_sift_epoch(); }
SiftCounts TrainStep::sift_counts() const { return state_->sift_counts(); }
Shape TrainStep::state_shape(const std::string& name) const { return state_->whole_shape(name); }

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

int TrainStep::ranks() const { return options_.communicator->size(); }

int TrainStep::state_pieces() const { return options_.zero > 0 ? ranks() : 1; }

int TrainStep::state_pieces(const std::string& name) const {
  return step_names::is_step_wide_state(name) ? 1 : state_pieces();
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

const HostTensor& TrainStep::sift_rows() const {
  if (!sift_rows_)
    throw std::logic_error("sinter: sift_rows() before a step with in-step sifting has run");
  return *sift_rows_;
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
  std::vector<TensorType> parameter_types;
  for (const HostTensor* p : parameters_)
    parameter_types.push_back(TensorType{p->dtype(), p->shape()});
  const TracedStepCheck check{names_, parameter_types, options_.frozen, sifting != Sifting::none};
  Graph graph = run.run(trace_stage(trace_, batch, check, built.batch_names), Graph());
  const StepGraphFacts facts{names_, built.batch_names, ranks()};
  const std::vector<WorkingCopy>& copies = state_->working_copies();
  // The step's features, each contributing its stages (the order is jit/pipeline/stage.cpp's).
  std::vector<Stage> stages;
  if (sifting != Sifting::none)
    stages.push_back(sift_stage(
        *options_.sift, batch, facts, sifting == Sifting::select,
        sifting == Sifting::select ? sift_rows_for(batch.front().shape().at(0)) : 0, trace_));
  if (options_.amp != AmpMode::off) {
    stages.push_back(autocast_stage(options_.amp));
    if (options_.update.loss_scaling) stages.push_back(loss_scale_stage());
    stages.push_back(state_->working_copies_stage());
  }
  stages.push_back(step_autodiff_stage(facts, copies));
  if (options_.amp != AmpMode::off) stages.push_back(merge_gradients_stage(facts, copies));
  if (ranks() > 1) stages.push_back(loss_all_reduce_stage(ranks()));
  DataParallelLayout layout{ranks(), options_.zero, options_.bucket_bytes};
  stages.push_back(update_stage(facts, copies, options_.update, layout, !split_update()));
  built.step = Pipeline(std::move(stages)).run(std::move(graph), run);
  built.later = Pipeline::standard(std::nullopt);
  if (sifting == Sifting::select)
    built.later = std::move(built.later).with(share_taken_rows_stage());
  if (split_update())
    built.apply = update_program(facts, copies, check.parameter_types, options_.update, layout);
  return built;
}

Graph TrainStep::plan_graph(std::span<const HostTensor> batch, CompileRun& run) {
  Built built = build(batch, options_.sift ? Sifting::select : Sifting::none, run);
  return built.later.run(std::move(built.step), run);
}

Graph TrainStep::plan_graph(std::span<const HostTensor> batch) {
  CompileRun run("train step", true);
  return plan_graph(batch, run);
}

void TrainStep::remember_other_shape(std::span<const HostTensor> batch) {
  Device device = default_device();
  const BackendEntry& backend = backend_entry(device.backend);
  if (!backend.remember_shapes || !switch_setting("SINTER_ROWS_PARAMETER", true)) return;
  try {
    CompileRun run("train step", true);
    Built built = build(batch, options_.sift ? Sifting::select : Sifting::none, run);
    Prepared prepared = prepare_for(built.later.run(std::move(built.step), run), device, run);
    run.finish(device.name());
    backend.remember_shapes(prepared, device);
  } catch (const std::exception&) {
    // A model that cannot take this bucket (a length past its context, say) is not an error
    // here: that bucket's first call says so. Its kernels are then compiled for each shape.
  }
}

TrainStep::ResidentBytes TrainStep::resident_bytes() const {
  ResidentBytes bytes;
  for (const HostTensor* p : parameters_)
    bytes.parameters += static_cast<int64_t>(p->byte_size());
  for (const auto& [name, tensor] : state_->tensors())
    bytes.optimizer_state += static_cast<int64_t>(tensor.byte_size());
  for (const auto& [name, tensor] : options_.frozen)
    bytes.frozen += static_cast<int64_t>(tensor->byte_size());
  return bytes;
}

StepMemory TrainStep::plan_memory(std::span<const HostTensor> batch) {
  CompileRun run("train step", true);
  Built built = build(batch, options_.sift ? Sifting::select : Sifting::none, run);
  return plan_for(built.later.run(std::move(built.step), run), built.batch_names, run);
}

StepMemory TrainStep::plan_for(const Graph& optimized, const std::vector<std::string>& batch_names,
                               CompileRun& run) const {
  // As the compiled step keeps them: parameters and optimizer state carried, frozen inputs
  // (and a resident batch) resident, one copy each.
  const std::vector<InputKeeping> keeping = input_keeping(
      optimized, StepInputNames{names_, batch_names, frozen_names_, options_.resident_batch});
  Device device = default_device();
  Prepared prepared = prepare_for(optimized, device, run);
  run.finish(device.name());
  return backend_entry(device.backend).plan_memory(prepared, device, keeping);
}

MaxBatch TrainStep::max_batch(std::span<const HostTensor> example, int64_t budget_bytes) {
  return search_max_batch(example, budget_bytes, [this](std::span<const HostTensor> batch) {
    return plan_memory(batch).total();
  });
}

namespace {
// The device's free memory once a failed allocation's partial work is released (the catch
// site has dropped it), or what the failure saw if the device cannot say.
int64_t available_after(const OutOfMemory& failure, const Device& device) {
  try {
    return backend_entry(device.backend).free_memory(device);
  } catch (const std::exception&) {
    return failure.available_bytes();
  }
}
} // namespace

[[noreturn]] void TrainStep::explain_out_of_memory(std::span<const HostTensor> batch,
                                                   const StepMemory& planned, int64_t available,
                                                   const std::string& cause) {
  std::string message = out_of_memory_report(
      default_device().name(), batch, planned, available, cause,
      [this](std::span<const HostTensor> b) { return plan_memory(b).total(); });
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
  if (ranks() > 1)
    check_step_agrees(*options_.communicator, names_, parameters_, batch_names, batch,
                      "accumulate " + std::to_string(options_.accumulate) + ", amp " +
                          std::string(amp_name(options_.amp)) + ", zero " +
                          std::to_string(options_.zero) + ", gradient buckets of " +
                          std::to_string(options_.bucket_bytes) + " bytes");
  auto compiled = std::make_unique<Compiled>();
  Device backend = default_device();
  if (std::optional<int64_t> limit = memory_limit_from_environment()) {
    CompileRun planning("train step", true);
    StepMemory planned =
        plan_for(built.later.run(Graph(built.step), planning), built.batch_names, planning);
    if (planned.total() > *limit)
      explain_out_of_memory(batch, planned, *limit,
                            "the planned peak is over SINTER_MEMORY_LIMIT=" +
                                std::to_string(*limit));
  }
  try {
    const StepInputNames input_names{names_, batch_names, frozen_names_, options_.resident_batch};
    auto compile = [&](Graph graph, const Pipeline& later, CompileRun& program_run) {
      auto program =
          std::make_unique<CompiledGraph>(std::move(graph), later, program_run, backend, context_);
      program->set_communicator(*options_.communicator);
      program->set_label(program_run.program());
      return connect_program(std::move(program), input_names);
    };
    compiled->step = compile(std::move(built.step), built.later, run);
    if (delay) compiled->delay = compile(std::move(delay->step), delay->later, delay_run);
    if (split_update()) {
      CompileRun apply_run("train step (update)");
      apply_run.given("update", built.apply, 0); // built with the step's graph
      compiled->apply =
          compile(std::move(built.apply), Pipeline::standard(std::nullopt), apply_run);
    }
  } catch (const OutOfMemory& e) {
    // What the failed compile allocated is freed by now: the batch that fits is planned
    // against what is free for a retry, not what was left at the failing allocation.
    explain_out_of_memory(batch, plan_memory(batch), available_after(e, backend), e.what());
  } catch (const std::bad_alloc&) {
    explain_out_of_memory(batch, plan_memory(batch),
                          backend_entry(backend.backend).free_memory(backend),
                          "a host allocation failed");
  }

  if (options_.sift) {
    const auto& outputs = compiled->step.program->graph().outputs();
    for (std::size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i].name == step_names::sift_rows) compiled->rows_output = i;
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
  state_->refresh_working_copies();
  std::vector<HostTensor> scalars = scalar_inputs(lr);
  const StepValues values{parameters_, batch,           scalars, &state_->tensors(),
                          grad_sums_,  options_.frozen, &rank_,  &sift_uniforms_};
  auto run = [&](const StepProgram& program) {
    try {
      program.program->run_into(program_inputs(program, values), program.outputs);
    } catch (const NumericsError& e) { // name the step it happened in
      std::string what = e.what();
      const std::string tag = "non-finite value";
      if (std::size_t at = what.find(tag); at != std::string::npos)
        what.insert(at + tag.size(), " in step " + std::to_string(steps_ + 1));
      throw NumericsError(what);
    }
  };
  // In-step sifting: the delay runs the whole-batch step; either way every row gets a draw.
  const bool delaying = state_->sift_delaying();
  const StepProgram& step = delaying ? c.delay : c.step;
  const int64_t rows = options_.sift ? batch.front().shape().at(0) : 0;
  if (options_.sift) state_->draw(sift_uniforms_, rows, options_.communicator->rank());
  options_.communicator->set_step(steps_ + 1); // named by a collective that fails
  try {
    run(step);
  } catch (const OutOfMemory& e) {
    // The first run allocates what compiling left (workspace, graph capture): explain it once,
    // after dropping the program, so that its buffers do not stand in the way of a retry with
    // a smaller batch.
    if (!first_run || e.planned_bytes() != 0) throw;
    last_ = nullptr;
    by_batch_types_.erase(batch_key(batch));
    explain_out_of_memory(batch, plan_memory(batch), available_after(e, default_device()),
                          e.what());
  }
  // Moved, not copied: on a GPU the loss is still deferred, so the step runs on while the
  // caller prepares the next batch; reading it waits for the step.
  auto loss = std::make_shared<HostTensor>(std::move(step.outputs[0]));
  if (options_.sift) {
    if (!delaying) {
      sift_rows_ = std::make_shared<HostTensor>(std::move(step.outputs[*c.rows_output]));
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
    state_->count_sifted(rows, sift_rows_->size(), ranks());
  }
  take_new_values(step, names_, parameters_, state_->tensors()); // with accumulation: sifting's
  if (!c.apply) {
    finish_update();
    return LossHandle(loss);
  }
  // Accumulation: sum this micro-batch's gradients; update on the k-th.
  add_gradients(step, names_, parameters_, grad_sums_);
  if (++micro_steps_ % options_.accumulate == 0) {
    // Data parallel: the update program reduces the summed gradients over the ranks
    // (grad_scale divides by k·ranks).
    run(c.apply);
    take_new_values(c.apply, names_, parameters_, state_->tensors());
    for (HostTensor& sum : grad_sums_)
      std::fill(sum.bytes().begin(), sum.bytes().end(), std::byte{0});
    finish_update();
  }
  return LossHandle(loss);
}

void TrainStep::finish_update() {
  state_->note_parameters_written();
  ++steps_;
  if (options_.check_every <= 0 || ranks() == 1 || steps_ % options_.check_every != 0) return;
  std::vector<std::string> lines = parameter_checksums(names_, parameters_);
  for (std::string& line : lines)
    line += ")";
  check_ranks_agree(*options_.communicator, lines,
                    "the parameters after update " + std::to_string(steps_) +
                        " (they drifted apart: a rank computed something else; the check runs "
                        "every " +
                        std::to_string(options_.check_every) + " updates)");
}

} // namespace sinter
