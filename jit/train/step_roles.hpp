// jit/train/step_roles.hpp — the roles of a training step program's inputs and outputs, and
// the one place their names are spelt
#pragma once
#include "jit/passes/passes.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sinter {

/// What feeds one input of a step program.
enum class StepInput {
  parameter,       ///< a trained parameter (carried: the step's `new.` output replaces it)
  batch,           ///< the caller's batch
  scalar,          ///< learning rate, gradient scale, update count (scalar_names())
  state,           ///< optimizer or step-wide state (`state.*`, checkpointed, carried)
  frozen,          ///< a frozen input, such as a distillation teacher's weights (resident)
  rank,            ///< this process's rank (data parallel)
  sift_draws,      ///< in-step sifting: one uniform draw per row
  summed_gradient, ///< the update program of accumulation: a parameter's summed gradient
};

/// The names of the inputs and outputs that pass between a step's programs and its host state.
/// Code builds and reads them only through these, so a misspelt prefix does not compile.
namespace step_names {

/// `state.<kind>.<parameter>`: a parameter's optimizer state (`m`, `v`, ...).
inline std::string optimizer_state(std::string_view kind, std::string_view parameter) {
  return "state." + std::string(kind) + "." + std::string(parameter);
}
/// `state.low.<parameter>`: a parameter's low-precision working copy under AMP.
inline std::string working_copy(std::string_view parameter) {
  return "state.low." + std::string(parameter);
}
inline const std::string loss_scale = "state.amp.scale";
inline const std::string loss_scale_good_steps = "state.amp.good_steps";
inline const std::string loss_scale_skipped = "state.amp.skipped";
inline const std::string sift_history = "state.sift.history";
inline const std::string sift_filled = "state.sift.filled";
inline const std::string sift_counters = "state.sift.counters";
inline const std::string sift_draws = "sift.uniforms";
/// `grad.<parameter>`: the update program's input of a summed gradient.
inline std::string summed_gradient(std::string_view parameter) {
  return "grad." + std::string(parameter);
}

/// `grad:<input>`: autodiff's output for an input (gradient_output_name).
inline std::string gradient(std::string_view input) { return gradient_output_name(input); }
/// `new.<input>`: the value that replaces input `input` for the next call.
inline std::string new_value(std::string_view input) { return "new." + std::string(input); }
/// The input that output `output` replaces, if it is a new value.
inline std::optional<std::string> replaced_input(std::string_view output) {
  if (!output.starts_with("new.")) return std::nullopt;
  return std::string(output.substr(4));
}
/// The parameter whose gradient output `output` is, if it is one.
inline std::optional<std::string> gradient_of(std::string_view output) {
  return gradient_input_name(output);
}
inline const std::string scaled_loss = "amp.scaled_loss";
inline const std::string trained_loss = "sift.trained_loss";
inline const std::string sift_rows = "sift.rows";

/// Whether `name` is step state (`state.*`): optimizer state, loss scaling, sifting, working
/// copies.
inline bool is_state(std::string_view name) { return name.starts_with("state."); }
/// Step-wide state every rank keeps whole (loss scaling, in-step sifting), as opposed to a
/// parameter's optimizer state, which ZeRO shards.
inline bool is_step_wide_state(std::string_view name) {
  return name.starts_with("state.amp.") || name.starts_with("state.sift.");
}
inline bool is_working_copy(std::string_view name) { return name.starts_with("state.low."); }
/// A checkpoint's key for step state `name`: `optimizer.<name without state.>`.
inline std::string checkpoint_key(std::string_view name) {
  return "optimizer." + std::string(name.substr(std::string_view("state.").size()));
}
/// In-step sifting's outputs that leave the step for its host state (the loss history's new
/// value, the drawn rows).
inline bool is_sift_output(std::string_view name) {
  return name == sift_rows || name == new_value(sift_history) || name == new_value(sift_filled);
}

} // namespace step_names

/// What feeds input `name` of a step program, and its index among the parameters, the batch,
/// the scalars or the frozen inputs (0 for the others); std::logic_error for a name no role has.
std::pair<StepInput, std::size_t> step_input_role(const std::string& name,
                                                  const std::vector<std::string>& parameters,
                                                  const std::vector<std::string>& batch,
                                                  const std::vector<std::string>& frozen);

} // namespace sinter
