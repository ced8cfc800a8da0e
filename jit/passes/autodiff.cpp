// jit/passes/autodiff.cpp — reverse-mode differentiation as an IR → IR pass
// The gradient graph is appended to the forward graph as ordinary nodes, so later passes
// (simplify, cse, fusion) treat forward and backward together.
#include "jit/passes/passes.hpp"
#include "ops/registry.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace sinter {
namespace {

/// Composites whose gradient is defined through their lowering are expanded first.
Graph expand_composites_without_gradient(const Graph& graph) {
  return lower_selected(graph, [](OpId op) {
    const OpDef& def = op_def(op);
    return def.differentiable && !def.grad;
  });
}

std::vector<ValueId> resolve_wrt(const Graph& g, const AutodiffOptions& options) {
  std::vector<ValueId> ids;
  if (options.wrt.empty()) {
    for (const NamedValue& in : g.inputs())
      if (is_float(g.type(in.id).dtype)) ids.push_back(in.id);
    return ids;
  }
  for (const std::string& name : options.wrt) {
    auto it = std::find_if(g.inputs().begin(), g.inputs().end(),
                           [&](const NamedValue& in) { return in.name == name; });
    if (it == g.inputs().end()) {
      std::string known;
      for (const NamedValue& in : g.inputs())
        known += (known.empty() ? "" : ", ") + in.name;
      throw std::invalid_argument("sinter: cannot differentiate with respect to '" + name +
                                  "': no such input (inputs: " + known + ")");
    }
    DType t = g.type(it->id).dtype;
    if (!is_float(t))
      throw std::invalid_argument("sinter: cannot differentiate with respect to input '" + name +
                                  "' (" + std::string(dtype_name(t)) +
                                  "): gradients exist only for floating-point inputs — remove it "
                                  "from wrt, or make it a float input");
    ids.push_back(it->id);
  }
  return ids;
}

} // namespace

Graph autodiff(const Graph& graph, const AutodiffOptions& options) {
  if (options.output >= graph.outputs().size())
    throw std::invalid_argument("sinter: autodiff output index " + std::to_string(options.output) +
                                " but the graph has " + std::to_string(graph.outputs().size()) +
                                " outputs");
  Graph g = expand_composites_without_gradient(graph);
  std::vector<ValueId> wrt = resolve_wrt(g, options);
  // Gradient code lives in `<path>.bwd` under the forward node's path (kernel names, dumps).
  std::map<uint32_t, uint32_t> backward_scopes;
  auto backward_scope = [&](uint32_t forward) {
    auto [it, added] = backward_scopes.emplace(forward, 0);
    if (added) {
      const std::string& path = g.scope_path(forward);
      it->second = g.intern_scope(path.empty() ? "bwd" : path + ".bwd", g.scope_precision(forward));
    }
    return it->second;
  };
  ValueId target = g.outputs()[options.output].id;
  if (!is_float(g.type(target).dtype))
    throw std::invalid_argument("sinter: cannot differentiate output '" +
                                g.outputs()[options.output].name + "' of type " +
                                to_string(g.type(target)) + ": it is not floating point");

  // Only nodes that depend on a wrt input and that the target depends on carry cotangents.
  std::size_t forward_size = g.size();
  std::vector<bool> depends(forward_size, false), needed(forward_size, false);
  for (ValueId id : wrt)
    depends[id] = true;
  for (ValueId id = 0; id < forward_size; ++id) {
    const Node& n = g.node(id);
    if (!op_def(n.op).differentiable) continue;
    for (ValueId in : n.inputs)
      depends[id] = depends[id] || depends[in];
  }
  needed[target] = true;
  for (ValueId id = static_cast<ValueId>(forward_size); id-- > 0;)
    if (needed[id])
      for (ValueId in : g.node(id).inputs)
        needed[in] = true;

  std::vector<Value> cotangent(forward_size);
  cotangent[target] = ones_like(Value{&g, target});
  for (ValueId id = target + 1; id-- > 0;) {
    if (!cotangent[id] || !depends[id]) continue;
    const Node& n = g.node(id);
    if (n.op == OpId::input) continue;
    const OpDef& def = op_def(n.op);
    if (!def.differentiable) continue;
    std::vector<Value> operands;
    for (ValueId in : n.inputs)
      operands.push_back(Value{&g, in});
    g.set_current_scope(backward_scope(n.scope));
    Attrs attrs = n.attrs; // the rule may add nodes, which can move g's node storage
    std::vector<Value> grads = def.grad(GradArgs{operands, Value{&g, id}, cotangent[id], attrs});
    for (std::size_t i = 0; i < operands.size(); ++i) {
      ValueId in = operands[i].id;
      if (!grads[i] || !depends[in] || !needed[in] || !is_float(g.type(in).dtype)) continue;
      cotangent[in] = cotangent[in] ? cotangent[in] + grads[i] : grads[i];
    }
  }
  g.set_current_scope(0);

  for (ValueId id : wrt) {
    Value grad = cotangent[id] ? cotangent[id] : zeros_like(Value{&g, id});
    const auto& name =
        std::find_if(g.inputs().begin(), g.inputs().end(), [&](const NamedValue& in) {
          return in.id == id;
        })->name;
    g.add_output(gradient_output_name(name), grad.id);
  }
  return g;
}

std::string gradient_output_name(std::string_view input) { return "grad:" + std::string(input); }

std::optional<std::string> gradient_input_name(std::string_view output) {
  if (!output.starts_with("grad:")) return std::nullopt;
  return std::string(output.substr(5));
}

} // namespace sinter
