// jit/train/step_program.hpp — one compiled program of a training step, and how its inputs and
// outputs connect to the step's host values by role
#pragma once
#include "jit/api.hpp"
#include "jit/backend/executable.hpp"
#include "jit/train/step_roles.hpp"

#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace sinter {

/// A compiled program (the step, its sifting delay, or accumulation's update) with what feeds
/// each of its inputs and the tensors its runs write.
struct StepProgram {
  struct Feed {
    StepInput role;
    std::size_t index = 0; ///< among the parameters, batch, scalars, frozen or summed grads
    std::string state;     ///< StepInput::state: its name
  };
  std::unique_ptr<CompiledGraph> program;
  std::vector<Feed> feeds;
  mutable std::vector<HostTensor> outputs;
  explicit operator bool() const { return program != nullptr; }
};

/// The names the step's inputs are matched against.
struct StepInputNames {
  const std::vector<std::string>& parameters;
  const std::vector<std::string>& batch;
  const std::vector<std::string>& frozen;
  bool resident_batch = false; ///< TrainStepOptions::resident_batch
};

/// How the step keeps each of `g`'s inputs on a device (what connect_program declares, and
/// what a memory plan counts): inputs an output `new.<input>` replaces are carried, frozen
/// inputs resident, and the batch too with `resident_batch`; the rest come with each run.
std::vector<InputKeeping> input_keeping(const Graph& g, const StepInputNames& names);

/// `program` with each input's feed found by role, and its outputs allocated. Declares what
/// stays on a device between runs: inputs an output `new.<input>` replaces (parameters,
/// state) are carried, frozen inputs (a teacher's weights) resident, and the batch too with
/// `resident_batch`.
StepProgram connect_program(std::unique_ptr<CompiledGraph> program, const StepInputNames& names);

/// Where a step keeps the values its programs read.
struct StepValues {
  std::span<HostTensor* const> parameters;
  std::span<const HostTensor> batch;
  std::span<const HostTensor> scalars;
  std::map<std::string, HostTensor>* state = nullptr;
  std::span<const HostTensor> summed_gradients;
  std::span<const std::pair<std::string, const HostTensor*>> frozen;
  const HostTensor* rank = nullptr;
  const HostTensor* sift_draws = nullptr;
};

/// The program's inputs, in order, from `values`.
std::vector<const HostTensor*> program_inputs(const StepProgram& program, const StepValues& values);

/// Outputs `new.<input>` replace the parameter or state they update, by swapping buffers (the
/// old ones are the next run's outputs).
void take_new_values(const StepProgram& program, const std::vector<std::string>& parameter_names,
                     std::span<HostTensor* const> parameters,
                     std::map<std::string, HostTensor>& state);

/// Accumulation: adds a micro-batch's gradients (the step's gradient outputs) to `sums`, one
/// per parameter (made zero on first use).
void add_gradients(const StepProgram& step, const std::vector<std::string>& parameter_names,
                   std::span<HostTensor* const> parameters, std::vector<HostTensor>& sums);

} // namespace sinter
