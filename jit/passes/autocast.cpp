// jit/passes/autocast.cpp — the mixed-precision pass: retypes f32 work by each op's precision rule
#include "jit/passes/passes.hpp"
#include "ops/registry.hpp"

#include <stdexcept>
#include <vector>

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

/// The values an op may round to the low precision together with its low operands: graph
/// inputs (parameters), constants, what is computed from constants alone (masks, scales), and
/// views of these (a bias broadcast over the batch). Everything else that is f32 is f32 work —
/// the residual stream — and an op mixing it with low values computes in f32, as PyTorch's
/// type promotion has `x + block(x)` keep an f32 `x` in f32.
std::vector<bool> castable_values(const Graph& graph) {
  std::vector<bool> from_constants(graph.size()), castable(graph.size());
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    bool constant = n.op != OpId::input;
    for (ValueId in : n.inputs)
      constant = constant && from_constants[in];
    bool view = (n.op == OpId::reshape || n.op == OpId::permute || n.op == OpId::broadcast ||
                 n.op == OpId::broadcast_to || n.op == OpId::transpose || n.op == OpId::slice) &&
                castable[n.inputs[0]];
    from_constants[id] = constant;
    castable[id] = constant || n.op == OpId::input || view;
  }
  return castable;
}

} // namespace

Graph autocast(const Graph& graph, DType low) {
  if (low != DType::bf16 && low != DType::f16)
    throw std::invalid_argument("sinter: autocast needs bf16 or f16 as its low precision, got " +
                                std::string(dtype_name(low)));
  const std::vector<bool> castable = castable_values(graph);
  Graph out = rebuild(
      graph,
      [&](const Node& n, std::span<const Value> mapped) -> Value {
        if (n.inputs.empty()) return {}; // constants and iota keep their types
        std::vector<Value> operands(mapped.begin(), mapped.end());
        // Only values that were f32 change precision: f64 and integer work is the user's
        // choice, and so is an explicit cast's target.
        if (n.op != OpId::cast) {
          DType target = DType::f32;
          switch (rule_for(graph, n)) {
          case Precision::low: target = low; break;
          case Precision::fp32: target = DType::f32; break;
          case Precision::follow_input: {
            // Low when a low operand meets nothing but castable f32 values (a GEMM's output
            // and its bias); f32 when it meets f32 work.
            bool low_operand = false, f32_work = false;
            for (std::size_t i = 0; i < operands.size(); ++i) {
              if (graph.type(n.inputs[i]).dtype != DType::f32) continue;
              if (operands[i].dtype() == low)
                low_operand = true;
              else if (!castable[n.inputs[i]])
                f32_work = true;
            }
            if (low_operand && !f32_work) target = low;
            break;
          }
          }
          for (std::size_t i = 0; i < operands.size(); ++i)
            if (graph.type(n.inputs[i]).dtype == DType::f32 && operands[i].dtype() != target)
              operands[i] = cast(operands[i], target);
        }
        return emit(*operands[0].graph, n.op, operands, n.attrs);
      },
      /*may_retype=*/true);
  // Each output keeps its type.
  for (std::size_t i = 0; i < graph.outputs().size(); ++i) {
    DType want = graph.type(graph.outputs()[i].id).dtype;
    Value v{&out, out.outputs()[i].id};
    if (v.dtype() != want) out.mutable_outputs()[i].id = cast(v, want).id;
  }
  return out;
}

} // namespace sinter
