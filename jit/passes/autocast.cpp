// jit/passes/autocast.cpp — the mixed-precision pass: retypes f32 work by each op's precision rule
#include "jit/passes/passes.hpp"
#include "ops/registry.hpp"

#include <stdexcept>

namespace sinter {
namespace {

/// The precision node `n` computes in: the user's region first, then the op's own rule.
Precision rule_for(const Graph& graph, const Node& n) {
  switch (graph.scope_precision(n.scope)) {
  case RegionPrecision::fp32: return Precision::fp32;
  case RegionPrecision::low: return Precision::low;
  case RegionPrecision::policy: break;
  }
  return op_def(n.op).precision;
}

} // namespace

Graph autocast(const Graph& graph, DType low) {
  if (low != DType::bf16 && low != DType::f16)
    throw std::invalid_argument("sinter: autocast needs bf16 or f16 as its low precision, got " +
                                std::string(dtype_name(low)));
  std::vector<bool> live(graph.size(), false);
  for (const NamedValue& out : graph.outputs())
    live[out.id] = true;
  for (ValueId id = static_cast<ValueId>(graph.size()); id-- > 0;)
    if (live[id])
      for (ValueId in : graph.node(id).inputs)
        live[in] = true;

  Graph out;
  std::vector<uint32_t> scope_map(graph.scope_count(), 0);
  for (uint32_t s = 1; s < graph.scope_count(); ++s)
    scope_map[s] = out.intern_scope(graph.scope_path(s), graph.scope_precision(s));
  std::vector<Value> mapped(graph.size());
  for (const NamedValue& in : graph.inputs())
    mapped[in.id] = Value{&out, out.add_input(in.name, graph.type(in.id))};

  std::vector<Value> operands;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    if (!live[id] || n.op == OpId::input) continue;
    out.set_current_scope(scope_map[n.scope]);
    operands.clear();
    for (ValueId in : n.inputs)
      operands.push_back(mapped[in]);
    // Only values that were f32 change precision: f64 and integer work is the user's choice,
    // and so is an explicit cast's target.
    if (n.op != OpId::cast && !n.inputs.empty()) {
      DType target = DType::f32;
      switch (rule_for(graph, n)) {
      case Precision::low: target = low; break;
      case Precision::fp32: target = DType::f32; break;
      case Precision::follow_input:
        for (std::size_t i = 0; i < operands.size(); ++i)
          if (graph.type(n.inputs[i]).dtype == DType::f32 && operands[i].dtype() == low)
            target = low;
        break;
      }
      for (std::size_t i = 0; i < operands.size(); ++i)
        if (graph.type(n.inputs[i]).dtype == DType::f32 && operands[i].dtype() != target)
          operands[i] = cast(operands[i], target);
    }
    mapped[id] = emit(out, n.op, operands, n.attrs);
  }
  out.set_current_scope(0);
  for (const NamedValue& o : graph.outputs()) {
    Value v = mapped[o.id];
    DType want = graph.type(o.id).dtype;
    out.add_output(o.name, (v.dtype() == want ? v : cast(v, want)).id);
  }
  return out;
}

} // namespace sinter
