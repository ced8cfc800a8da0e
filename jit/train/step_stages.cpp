// jit/train/step_stages.cpp — the stages of a training step's graph: sifting, mixed precision,
// autodiff of the step, data parallel's loss, and the update that decides what leaves the step
#include "jit/train/step_stages.hpp"

#include "jit/passes/passes.hpp"
#include "jit/train/max_batch.hpp" // resized_batch
#include "jit/train/step_roles.hpp"

#include <algorithm>
#include <stdexcept>

namespace sinter {
namespace {

/// The output autodiff differentiates: the scaled loss under fp16 scaling, else the drawn
/// rows' loss under in-step sifting, else the loss (output 0).
std::size_t differentiated_output(const Graph& g) {
  std::size_t chosen = 0;
  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    if (g.outputs()[i].name == step_names::scaled_loss) return i;
    if (g.outputs()[i].name == step_names::trained_loss) chosen = i;
  }
  return chosen;
}

/// The loss output of the traced graph as a value of `traced`, checked to be one f32 per row.
Value per_row_losses(const Graph& traced, int64_t rows) {
  const TensorType& t = traced.type(traced.outputs().at(0).id);
  if (!is_float(t.dtype) || t.shape != Shape{rows})
    throw std::invalid_argument(
        "sinter: with in-step sifting the loss function returns each row's loss, f32[" +
        std::to_string(rows) + "] (the loss with Reduction::none), got " + to_string(t));
  return Value{const_cast<Graph*>(&traced), traced.outputs()[0].id};
}

Graph sift_forward(Graph g, const SiftOptions& sift, std::span<const HostTensor> batch,
                   const StepGraphFacts& facts, bool select, int64_t rows_trained,
                   const StepTracer& trace) {
  const int64_t rows = batch.front().shape().at(0);
  for (const HostTensor& t : batch)
    if (t.shape().empty() || t.shape()[0] != rows)
      throw std::invalid_argument(
          "sinter: in-step sifting draws rows of the batch, so dim 0 of every batch input is "
          "the batch size; got " +
          to_string(TensorType{t.dtype(), t.shape()}) + " beside " + std::to_string(rows) +
          " rows");
  Value losses = cast(per_row_losses(g, rows), DType::f32);
  const int64_t h = sift.history;
  Value history = input(g, step_names::sift_history, TensorType{DType::f32, {h}});
  Value filled = input(g, step_names::sift_filled, TensorType{DType::f32, {}});
  // Data parallel: every rank records the whole global batch, so the history (and the
  // percentiles) are the same on every rank.
  Value scored = facts.ranks > 1 ? all_gather(losses, facts.ranks) : losses;
  const int64_t scored_rows = rows * facts.ranks;
  std::vector<Value> newest_first{scored, history};
  Value recorded = slice(concat(newest_first, 0), {0}, {h});
  Value now_filled = minimum(filled + static_cast<double>(scored_rows),
                             scalar_like(filled, static_cast<double>(h)));
  Value batch_loss = mean(losses);
  Value loss = batch_loss, selected;
  if (select) {
    Value uniforms = input(g, step_names::sift_draws, TensorType{DType::f32, {rows}});
    selected = sift_selection(losses, history, filled, uniforms, sift.beta, rows_trained);
    // The drawn rows' forward pass, traced at k rows on gathers of the batch; the
    // share-taken-rows stage later reads its values from the batch's.
    Graph part = trace(resized_batch(batch, rows_trained));
    per_row_losses(part, rows_trained);
    std::vector<Value> part_outputs = inline_graph(g, part, [&](const NamedValue& in) {
      Value whole{&g, input_named(g, in.name)};
      bool is_batch =
          std::find(facts.batch.begin(), facts.batch.end(), in.name) != facts.batch.end();
      return is_batch ? gather(whole, selected) : whole;
    });
    loss = mean(cast(part_outputs[0], DType::f32));
  }
  // The step reports the whole batch's mean loss (what a plain step reports) and trains the
  // drawn rows' mean.
  std::vector<NamedValue> outputs{{"loss", batch_loss.id},
                                  {step_names::trained_loss, loss.id},
                                  {step_names::new_value(step_names::sift_history), recorded.id},
                                  {step_names::new_value(step_names::sift_filled), now_filled.id}};
  if (selected) outputs.push_back({step_names::sift_rows, selected.id});
  g.mutable_outputs() = std::move(outputs);
  return g;
}

/// The parameters (graph inputs) or their gradients (outputs `grad:<name>`) as values of `g`.
std::vector<Value> parameter_values(Graph& g, const std::vector<std::string>& names,
                                    bool gradients) {
  std::vector<Value> values;
  for (const std::string& n : names)
    values.push_back(
        Value{&g, gradients ? output_named(g, step_names::gradient(n)) : input_named(g, n)});
  return values;
}

/// The update's values as the program's outputs: new parameters, their state, step-wide state,
/// then the working copies cast from the new parameters.
void add_update_outputs(Graph& g, const StepGraphFacts& facts,
                        const std::vector<WorkingCopy>& copies, const UpdateResult& updates,
                        const Optimizer& optimizer) {
  const std::vector<std::string>& names = facts.parameters;
  auto states = state_names(optimizer);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const UpdatedParameter& u = updates.parameters[i];
    g.add_output(step_names::new_value(names[i]), u.parameter.id);
    for (std::size_t s = 0; s < states.size(); ++s)
      g.add_output(step_names::new_value(step_names::optimizer_state(states[s], names[i])),
                   u.state[s].id);
  }
  for (const auto& [name, value] : updates.state)
    g.add_output(step_names::new_value(name), value.id);
  for (const WorkingCopy& copy : copies)
    g.add_output(step_names::new_value(copy.state),
                 cast(updates.parameters[copy.parameter].parameter, copy.dtype).id);
}

/// Every output `new.<name>` replaces the input `<name>` (parameters, optimizer state, the
/// working copies, the sifting history): a device may store it over that input (Donation).
void donate_replaced_inputs(Graph& g) {
  for (std::size_t o = 0; o < g.outputs().size(); ++o)
    if (std::optional<std::string> replaced = step_names::replaced_input(g.outputs()[o].name))
      for (std::size_t in = 0; in < g.inputs().size(); ++in)
        if (g.inputs()[in].name == *replaced &&
            g.type(g.inputs()[in].id) == g.type(g.outputs()[o].id))
          g.donate(in, o);
}

} // namespace

ValueId input_named(const Graph& g, const std::string& name) {
  for (const NamedValue& in : g.inputs())
    if (in.name == name) return in.id;
  throw std::logic_error("sinter: no graph input named " + name);
}

ValueId output_named(const Graph& g, const std::string& name) {
  for (const NamedValue& out : g.outputs())
    if (out.name == name) return out.id;
  throw std::logic_error("sinter: no graph output named " + name);
}

Stage trace_stage(const StepTracer& trace, std::span<const HostTensor> batch,
                  const TracedStepCheck& check, std::vector<std::string>& batch_names) {
  return {"trace", [&trace, batch, check, &batch_names](Graph) {
            return checked_trace(trace(batch), batch, check, batch_names);
          }};
}

Graph checked_trace(Graph forward, std::span<const HostTensor> batch, const TracedStepCheck& check,
                    std::vector<std::string>& batch_names) {
  const std::vector<std::string>& names = check.parameters;
  if (forward.outputs().empty())
    throw std::invalid_argument("sinter: the loss function returned nothing");
  if (!check.per_row_loss && !forward.type(forward.outputs()[0].id).shape.empty())
    throw std::invalid_argument("sinter: the loss (output 0) must be a scalar, got " +
                                to_string(forward.type(forward.outputs()[0].id)));
  for (std::size_t i = 0; i < names.size(); ++i) {
    const TensorType& t = forward.type(input_named(forward, names[i]));
    if (t != check.parameter_types[i])
      throw std::invalid_argument("sinter: parameter '" + names[i] + "' holds " +
                                  to_string(check.parameter_types[i]) +
                                  " but the model uses it as " + to_string(t));
  }
  auto is_frozen = [&](const std::string& name) {
    return std::any_of(check.frozen.begin(), check.frozen.end(),
                       [&](const auto& f) { return f.first == name; });
  };
  for (const auto& [name, tensor] : check.frozen) {
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
    if (std::find(names.begin(), names.end(), in.name) == names.end() && !is_frozen(in.name))
      batch_names.push_back(in.name);
  if (batch.size() != batch_names.size())
    throw std::invalid_argument("sinter: the step takes " + std::to_string(batch_names.size()) +
                                " batch inputs, got " + std::to_string(batch.size()));
  for (std::size_t j = 0; j < batch.size(); ++j) {
    const TensorType& want = forward.type(input_named(forward, batch_names[j]));
    if (batch[j].dtype() != want.dtype || batch[j].shape() != want.shape)
      throw std::invalid_argument("sinter: batch input '" + batch_names[j] + "' expects " +
                                  to_string(want) + ", got " +
                                  to_string(TensorType{batch[j].dtype(), batch[j].shape()}));
  }
  return forward;
}

Stage sift_stage(const SiftOptions& sift, std::span<const HostTensor> batch,
                 const StepGraphFacts& facts, bool select, int64_t rows_trained,
                 const StepTracer& trace) {
  return {"sift", [=, &sift, &trace](Graph g) {
            return sift_forward(std::move(g), sift, batch, facts, select, rows_trained, trace);
          }};
}

Stage share_taken_rows_stage() {
  return {"share-taken-rows",
          [](Graph g) { return share_taken_rows(g, output_named(g, step_names::sift_rows)); }};
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

Graph amp_forward(Graph forward, AmpMode mode) {
  if (mode == AmpMode::off) return forward;
  return autocast(forward, mode == AmpMode::bf16 ? DType::bf16 : DType::f16);
}

Stage autocast_stage(AmpMode mode) {
  return {"autocast", [mode](Graph g) { return amp_forward(std::move(g), mode); }};
}

Stage loss_scale_stage() {
  return {"loss-scale", [](Graph g) {
            Value loss{&g, g.outputs()[differentiated_output(g)].id};
            Value scale = input_once(g, step_names::loss_scale, TensorType{DType::f32, {}});
            g.add_output(step_names::scaled_loss, (loss * cast(scale, loss.dtype())).id);
            return g;
          }};
}

Stage step_autodiff_stage(const StepGraphFacts& facts, const std::vector<WorkingCopy>& copies) {
  return {"autodiff", [facts, &copies](Graph g) {
            // Only the parameters (and their working copies) are differentiated: frozen inputs
            // get no gradient, so nothing computed from them alone is kept for the backward.
            std::vector<std::string> wrt = facts.parameters;
            for (const WorkingCopy& copy : copies)
              if (std::any_of(g.inputs().begin(), g.inputs().end(),
                              [&](const NamedValue& in) { return in.name == copy.state; }))
                wrt.push_back(copy.state);
            return autodiff(g, AutodiffOptions{wrt, differentiated_output(g)});
          }};
}

Stage merge_gradients_stage(const StepGraphFacts& facts, const std::vector<WorkingCopy>& copies) {
  return {"merge-gradients", [facts, &copies](Graph grads) {
            auto& outs = grads.mutable_outputs();
            for (const WorkingCopy& copy : copies) {
              const std::string& name = facts.parameters[copy.parameter];
              auto own = std::find_if(outs.begin(), outs.end(), [&](const NamedValue& o) {
                return o.name == step_names::gradient(name);
              });
              auto via_copy = std::find_if(outs.begin(), outs.end(), [&](const NamedValue& o) {
                return o.name == step_names::gradient(copy.state);
              });
              if (via_copy == outs.end()) continue; // this batch type never read the copy
              Value sum = Value{&grads, own->id} +
                          cast(Value{&grads, via_copy->id}, grads.type(own->id).dtype);
              own->id = sum.id;
              outs.erase(via_copy);
            }
            // The scaled loss was only there to be differentiated.
            std::erase_if(
                outs, [](const NamedValue& out) { return out.name == step_names::scaled_loss; });
            return grads;
          }};
}

Stage loss_all_reduce_stage(int ranks) {
  return {"loss-all-reduce", [ranks](Graph g) {
            NamedValue& loss = g.mutable_outputs()[0];
            Value local{&g, loss.id};
            loss.id = (reshape(all_reduce(reshape(local, {1}), ranks), {}) * (1.0 / ranks)).id;
            return g;
          }};
}

Stage update_stage(const StepGraphFacts& facts, const std::vector<WorkingCopy>& copies,
                   const UpdateOptions& update, const DataParallelLayout& layout, bool append) {
  return {"update", [facts, &copies, &update, layout, append](Graph g) {
            // In-step sifting: the loss history's update and the drawn rows leave the step last.
            std::vector<NamedValue> sift_outputs;
            NamedValue loss = g.outputs()[0];
            for (const NamedValue& out : g.outputs())
              if (step_names::is_sift_output(out.name)) sift_outputs.push_back(out);
            std::vector<Value> grads = parameter_values(g, facts.parameters, true);
            g.mutable_outputs() = {loss};
            if (append) {
              std::vector<Value> params = parameter_values(g, facts.parameters, false);
              UpdateResult updates =
                  append_data_parallel_update(g, facts.parameters, params, grads, update, layout);
              add_update_outputs(g, facts, copies, updates, update.optimizer);
            } else {
              for (std::size_t i = 0; i < grads.size(); ++i)
                g.add_output(step_names::gradient(facts.parameters[i]), grads[i].id);
            }
            for (const NamedValue& out : sift_outputs)
              g.add_output(out.name, out.id);
            donate_replaced_inputs(g);
            return g;
          }};
}

Graph update_program(const StepGraphFacts& facts, const std::vector<WorkingCopy>& copies,
                     const std::vector<TensorType>& parameter_types, const UpdateOptions& update,
                     const DataParallelLayout& layout) {
  Graph apply;
  std::vector<Value> params, grads;
  for (std::size_t i = 0; i < facts.parameters.size(); ++i)
    params.push_back(input(apply, facts.parameters[i], parameter_types[i]));
  for (std::size_t i = 0; i < facts.parameters.size(); ++i)
    grads.push_back(
        input(apply, step_names::summed_gradient(facts.parameters[i]), parameter_types[i]));
  UpdateResult updates =
      append_data_parallel_update(apply, facts.parameters, params, grads, update, layout);
  add_update_outputs(apply, facts, copies, updates, update.optimizer);
  donate_replaced_inputs(apply);
  return apply;
}

} // namespace sinter
