// jit/train/step_program.cpp — connecting a step's programs to its host values: feeds by role,
// carried and resident inputs, new values taken back
#include "jit/train/step_program.hpp"

#include "jit/dist/data_parallel.hpp"
#include "jit/train/optimizer.hpp"

#include <algorithm>
#include <stdexcept>

namespace sinter {
namespace {

std::optional<std::size_t> index_in(const std::vector<std::string>& names,
                                    const std::string& name) {
  auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end()) return std::nullopt;
  return static_cast<std::size_t>(it - names.begin());
}

} // namespace

std::pair<StepInput, std::size_t> step_input_role(const std::string& name,
                                                  const std::vector<std::string>& parameters,
                                                  const std::vector<std::string>& batch,
                                                  const std::vector<std::string>& frozen) {
  static const std::vector<std::string> scalars = scalar_names();
  if (auto i = index_in(parameters, name)) return {StepInput::parameter, *i};
  if (auto i = index_in(batch, name)) return {StepInput::batch, *i};
  if (auto i = index_in(scalars, name)) return {StepInput::scalar, *i};
  if (step_names::is_state(name)) return {StepInput::state, 0};
  if (auto i = index_in(frozen, name)) return {StepInput::frozen, *i};
  if (name == rank_input_name()) return {StepInput::rank, 0};
  if (name == step_names::sift_draws) return {StepInput::sift_draws, 0};
  for (std::size_t i = 0; i < parameters.size(); ++i)
    if (name == step_names::summed_gradient(parameters[i])) return {StepInput::summed_gradient, i};
  throw std::logic_error("sinter: step input '" + name + "' has no role (jit/train/step_roles)");
}

namespace {
// (input, output) pairs where an output `new.<input>` replaces the input: parameters and
// optimizer state, which feed the next update.
std::vector<std::pair<std::size_t, std::size_t>> carried_pairs(const Graph& g) {
  std::vector<std::pair<std::size_t, std::size_t>> carried;
  for (std::size_t o = 0; o < g.outputs().size(); ++o)
    if (std::optional<std::string> replaced = step_names::replaced_input(g.outputs()[o].name))
      for (std::size_t in = 0; in < g.inputs().size(); ++in)
        if (g.inputs()[in].name == *replaced) carried.emplace_back(in, o);
  return carried;
}
} // namespace

std::vector<InputKeeping> input_keeping(const Graph& g, const StepInputNames& names) {
  std::vector<InputKeeping> keeping(g.inputs().size(), InputKeeping::per_run);
  for (std::size_t in = 0; in < g.inputs().size(); ++in) {
    StepInput role =
        step_input_role(g.inputs()[in].name, names.parameters, names.batch, names.frozen).first;
    // Frozen inputs (a teacher) are read by every step and never written: on a GPU they stay.
    if (role == StepInput::frozen || (role == StepInput::batch && names.resident_batch))
      keeping[in] = InputKeeping::resident;
  }
  // Parameters and optimizer state feed the next update: on a GPU they stay there.
  for (const auto& [in, replaced_by] : carried_pairs(g))
    keeping[in] = InputKeeping::carried;
  return keeping;
}

StepProgram connect_program(std::unique_ptr<CompiledGraph> compiled, const StepInputNames& names) {
  StepProgram out;
  out.program = std::move(compiled);
  const Graph& g = out.program->graph();
  for (std::size_t in = 0; in < g.inputs().size(); ++in) {
    auto [role, index] =
        step_input_role(g.inputs()[in].name, names.parameters, names.batch, names.frozen);
    out.feeds.push_back({role, index, role == StepInput::state ? g.inputs()[in].name : ""});
  }
  for (const NamedValue& o : g.outputs())
    out.outputs.emplace_back(g.type(o.id).dtype, g.type(o.id).shape);
  const std::vector<InputKeeping> keeping = input_keeping(g, names);
  std::vector<std::size_t> resident;
  for (std::size_t in = 0; in < keeping.size(); ++in)
    if (keeping[in] == InputKeeping::resident) resident.push_back(in);
  out.program->set_carried(carried_pairs(g));
  out.program->set_resident(resident);
  return out;
}

std::vector<const HostTensor*> program_inputs(const StepProgram& program,
                                              const StepValues& values) {
  std::vector<const HostTensor*> inputs;
  for (const StepProgram::Feed& feed : program.feeds) {
    switch (feed.role) {
    case StepInput::parameter: inputs.push_back(values.parameters[feed.index]); break;
    case StepInput::batch: inputs.push_back(&values.batch[feed.index]); break;
    case StepInput::scalar: inputs.push_back(&values.scalars[feed.index]); break;
    case StepInput::state: inputs.push_back(&values.state->at(feed.state)); break;
    case StepInput::frozen: inputs.push_back(values.frozen[feed.index].second); break;
    case StepInput::rank: inputs.push_back(values.rank); break;
    case StepInput::sift_draws: inputs.push_back(values.sift_draws); break;
    case StepInput::summed_gradient: inputs.push_back(&values.summed_gradients[feed.index]); break;
    }
  }
  return inputs;
}

void take_new_values(const StepProgram& program, const std::vector<std::string>& parameter_names,
                     std::span<HostTensor* const> parameters,
                     std::map<std::string, HostTensor>& state) {
  const auto& named = program.program->graph().outputs();
  for (std::size_t i = 0; i < named.size(); ++i) {
    std::optional<std::string> replaced = step_names::replaced_input(named[i].name);
    if (!replaced) continue;
    if (step_names::is_state(*replaced))
      std::swap(state.at(*replaced), program.outputs[i]);
    else
      std::swap(*parameters[*index_in(parameter_names, *replaced)], program.outputs[i]);
  }
}

void add_gradients(const StepProgram& step, const std::vector<std::string>& parameter_names,
                   std::span<HostTensor* const> parameters, std::vector<HostTensor>& sums) {
  if (sums.empty())
    for (HostTensor* p : parameters) {
      HostTensor zeros(p->dtype(), p->shape());
      std::fill(zeros.bytes().begin(), zeros.bytes().end(), std::byte{0});
      sums.push_back(std::move(zeros));
    }
  const auto& named = step.program->graph().outputs();
  for (std::size_t i = 1; i < named.size(); ++i) {
    std::optional<std::string> parameter = step_names::gradient_of(named[i].name);
    if (!parameter) continue;
    HostTensor& sum = sums[*index_in(parameter_names, *parameter)];
    const HostTensor& g = step.outputs[i];
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
}

} // namespace sinter
