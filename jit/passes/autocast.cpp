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

bool is_view(OpId op) {
  return op == OpId::reshape || op == OpId::permute || op == OpId::broadcast ||
         op == OpId::broadcast_to || op == OpId::transpose || op == OpId::slice;
}

/// The f32 values an op may round to the low precision together with its low operands:
/// constants, what is computed from constants alone (masks, scales) and views of these, as
/// PyTorch leaves a Python scalar out of type promotion; and an input stored in the low
/// precision itself, widened (a distillation teacher's weights stored bf16 under AMP and raised
/// to its parameters' f32 at the trace: a PyTorch teacher converted to bf16 adds its biases and
/// positions in bf16). Every other f32 value — the residual stream, an f32 parameter — is f32
/// work, and an op that mixes it with a low value computes in f32, as PyTorch's type promotion
/// has `x + block(x)` keep an f32 `x` in f32.
std::vector<bool> constant_values(const Graph& graph, DType low) {
  std::vector<bool> from_constants(graph.size()), castable(graph.size());
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    bool constant = n.op != OpId::input;
    for (ValueId in : n.inputs)
      constant = constant && from_constants[in];
    from_constants[id] = constant;
    bool widened_low_input = n.op == OpId::cast && n.type.dtype == DType::f32 &&
                             graph.node(n.inputs[0]).op == OpId::input &&
                             graph.type(n.inputs[0]).dtype == low;
    castable[id] = constant || widened_low_input || (is_view(n.op) && castable[n.inputs[0]]);
  }
  return castable;
}

/// Whether operand `i` of `n` is a bias added to a GEMM's result: a vector parameter broadcast
/// over the rows of a matmul (a Linear's `x · W + b`). PyTorch's `linear` adds it inside its
/// low-precision GEMM, so it joins the GEMM's precision here too.
bool gemm_bias(const Graph& graph, const Node& n, std::size_t i) {
  if (n.op != OpId::add || n.inputs.size() != 2) return false;
  ValueId bias = n.inputs[i], product = n.inputs[1 - i];
  while (is_view(graph.node(bias).op))
    bias = graph.node(bias).inputs[0];
  while (graph.node(product).op == OpId::reshape)
    product = graph.node(product).inputs[0];
  return graph.node(bias).op == OpId::input && graph.type(bias).shape.size() == 1 &&
         graph.node(product).op == OpId::matmul;
}

/// `bias` (a Linear's bias, possibly broadcast or reshaped to the GEMM's rows) cast to `low`
/// beneath its views: the vector is rounded, then broadcast. The backward then sums dY in the
/// GEMM's own type and widens the sum, as PyTorch's `linear` under autocast does; and a bias
/// gradient of D's type is one cuBLASLt's BGRADA epilogue writes (its bias-gradient vector has
/// the output's type), where an f32 sum of a bf16 GEMM's rows was a separate column reduction.
Value cast_beneath_views(Value bias, DType low) {
  const Node n = bias.node(); // a copy: casting the source below grows the graph
  if (!is_view(n.op)) return cast(bias, low);
  Value source = cast_beneath_views(Value{bias.graph, n.inputs[0]}, low);
  return emit(*bias.graph, n.op, std::span<const Value>(&source, 1), n.attrs);
}

} // namespace

Graph autocast(const Graph& graph, DType low) {
  if (low != DType::bf16 && low != DType::f16)
    throw std::invalid_argument("sinter: autocast needs bf16 or f16 as its low precision, got " +
                                std::string(dtype_name(low)));
  const std::vector<bool> castable = constant_values(graph, low);
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
            // Low when a low operand meets nothing but constants or a GEMM's bias; f32 when it
            // meets f32 work.
            bool low_operand = false, f32_work = false;
            for (std::size_t i = 0; i < operands.size(); ++i) {
              if (graph.type(n.inputs[i]).dtype != DType::f32) continue;
              if (operands[i].dtype() == low)
                low_operand = true;
              else if (!castable[n.inputs[i]] && !gemm_bias(graph, n, i))
                f32_work = true;
            }
            if (low_operand && !f32_work) target = low;
            break;
          }
          }
          for (std::size_t i = 0; i < operands.size(); ++i)
            if (graph.type(n.inputs[i]).dtype == DType::f32 && operands[i].dtype() != target)
              operands[i] = target == low && gemm_bias(graph, n, i)
                                ? cast_beneath_views(operands[i], target)
                                : cast(operands[i], target);
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
