// jit/train/step_state.cpp — a step's carried state: made, checkpointed, its working copies and
// sifting counters kept
#include "jit/train/step_state.hpp"

#include "jit/dist/data_parallel.hpp"
#include "jit/passes/passes.hpp"
#include "jit/train/step_roles.hpp"

#include <algorithm>

namespace sinter {
namespace {

/// The in-step sifting counters kept in `state.sift.counters` (so checkpoints carry them).
enum SiftCounter : int64_t { draws, batches, epoch_batches, seen, kept, count };

} // namespace

StepState::StepState(const std::vector<std::string>& names, std::span<HostTensor* const> parameters,
                     const UpdateOptions& update, const std::optional<SiftOptions>& sift,
                     int pieces)
    : names_(names), parameters_(parameters), update_(update), sift_(sift) {
  if (update.loss_scaling)
    for (const auto& [name, value] : loss_scaling_state(*update.loss_scaling))
      tensors_.emplace(name, HostTensor::from_doubles(DType::f32, {}, {&value, 1}));
  if (sift) {
    tensors_.emplace(step_names::sift_history, HostTensor(DType::f32, {sift->history}));
    tensors_.emplace(step_names::sift_filled, HostTensor(DType::f32, {}));
    tensors_.emplace(step_names::sift_counters, HostTensor(DType::i64, {SiftCounter::count}));
  }
  // Under ZeRO each rank keeps the state of its shard of every parameter. A new tensor is
  // zeros in pages the OS maps only when written: state that goes to a GPU as zeros takes no
  // host memory.
  for (std::size_t i = 0; i < names.size(); ++i)
    for (const std::string& kind : state_names(update.optimizer)) {
      Shape shape = parameters[i]->shape();
      if (pieces > 1) shape = {shard_elements(numel(shape), pieces)};
      tensors_.emplace(step_names::optimizer_state(kind, names[i]),
                       HostTensor(parameters[i]->dtype(), shape));
    }
}

std::vector<std::pair<std::string, HostTensor*>> StepState::checkpointed() {
  std::vector<std::pair<std::string, HostTensor*>> out;
  for (auto& [name, tensor] : tensors_)
    if (!step_names::is_working_copy(name)) out.emplace_back(name, &tensor);
  return out;
}

Shape StepState::whole_shape(const std::string& name) const {
  for (std::size_t i = 0; i < names_.size(); ++i)
    for (const std::string& kind : state_names(update_.optimizer))
      if (name == step_names::optimizer_state(kind, names_[i])) return parameters_[i]->shape();
  return tensors_.at(name).shape();
}

int64_t StepState::skipped_updates() const {
  auto it = tensors_.find(step_names::loss_scale_skipped);
  return it == tensors_.end() ? 0 : static_cast<int64_t>(it->second.at(0));
}

double StepState::loss_scale() const {
  auto it = tensors_.find(step_names::loss_scale);
  return it == tensors_.end() ? 0.0 : it->second.at(0);
}

Stage StepState::working_copies_stage() {
  return {
      "working-copies", [this](Graph forward) {
        std::map<ValueId, std::size_t> parameter_of;
        for (std::size_t i = 0; i < names_.size(); ++i)
          parameter_of[input_named(forward, names_[i])] = i;
        return rebuild(forward, [&](const Node& n, std::span<const Value> operands) -> Value {
          if (n.op != OpId::cast || !(n.attrs.dtype == DType::bf16 || n.attrs.dtype == DType::f16))
            return {};
          auto it = parameter_of.find(n.inputs[0]);
          if (it == parameter_of.end()) return {};
          std::string state = step_names::working_copy(names_[it->second]);
          if (!tensors_.contains(state)) {
            copies_.push_back(WorkingCopy{it->second, n.attrs.dtype, state});
            parameter_stamps_.assign(parameters_.size(), 0); // made before the first run
            tensors_.emplace(state, HostTensor(n.attrs.dtype, parameters_[it->second]->shape()));
          }
          return input_once(*operands[0].graph, state, n.type);
        });
      }};
}

void StepState::refresh_working_copies() {
  for (const WorkingCopy& copy : copies_) {
    const HostTensor& p = *parameters_[copy.parameter];
    if (p.stamp() == parameter_stamps_[copy.parameter]) continue;
    convert_values(p, tensors_.at(copy.state));
    parameter_stamps_[copy.parameter] = p.stamp();
  }
}

void StepState::note_parameters_written() {
  if (copies_.empty()) return;
  for (std::size_t i = 0; i < parameters_.size(); ++i)
    parameter_stamps_[i] = parameters_[i]->stamp();
}

bool StepState::sift_delaying() const {
  if (!sift_) return false;
  const HostTensor& counters = tensors_.at(step_names::sift_counters);
  double done =
      counters.at(sift_->repeat_delay ? SiftCounter::epoch_batches : SiftCounter::batches);
  return done < static_cast<double>(sift_->delay);
}

void StepState::start_sift_epoch() {
  if (!sift_) throw std::logic_error("sinter: start_sift_epoch on a step without in-step sifting");
  tensors_.at(step_names::sift_counters).set(SiftCounter::epoch_batches, 0.0);
}

SiftCounts StepState::sift_counts() const {
  if (!sift_) return {};
  const HostTensor& counters = tensors_.at(step_names::sift_counters);
  return SiftCounts{static_cast<int64_t>(counters.at(SiftCounter::seen)),
                    static_cast<int64_t>(counters.at(SiftCounter::kept)), sift_delaying()};
}

void StepState::draw(HostTensor& draws, int64_t rows, int rank) const {
  const HostTensor& counters = tensors_.at(step_names::sift_counters);
  auto first =
      static_cast<uint64_t>(counters.at(SiftCounter::draws)) + static_cast<uint64_t>(rank * rows);
  if (draws.shape() != Shape{rows}) draws = HostTensor(DType::f32, {rows});
  auto* u = reinterpret_cast<float*>(draws.bytes().data());
  for (int64_t i = 0; i < rows; ++i)
    u[i] = sift_uniform(sift_->seed, first + static_cast<uint64_t>(i));
}

void StepState::count_sifted(int64_t rows, int64_t kept_rows, int ranks) {
  HostTensor& counters = tensors_.at(step_names::sift_counters);
  auto bump = [&](SiftCounter which, int64_t by) {
    counters.set(which, counters.at(which) + static_cast<double>(by));
  };
  bump(SiftCounter::draws, rows * ranks);
  bump(SiftCounter::batches, 1);
  bump(SiftCounter::epoch_batches, 1);
  bump(SiftCounter::seen, rows);
  bump(SiftCounter::kept, kept_rows);
}

} // namespace sinter
