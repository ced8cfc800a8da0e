// jit/interp/interpreter.cpp — evaluates primitives with each op's float64 semantics
// The float64 meaning of a primitive is defined once, as its `reference` in ops/; this file
// schedules those over a graph, checks inputs and frees buffers after their last use.
#include "jit/interp/interpreter.hpp"

#include <cmath>
#include <stdexcept>

namespace sinter {
namespace {

// One entry per primitive, generated from the op list: a primitive without float64 semantics
// fails here at start-up of the table rather than deep inside a run.
const std::vector<const OpDef*>& primitive_table() {
  static const std::vector<const OpDef*> table = [] {
    std::vector<const OpDef*> t;
#define SINTER_PRIMITIVE(name)                                                                     \
  t.push_back(&op_defs::name##_op);                                                                \
  if (OpId::name != OpId::input && !op_defs::name##_op.reference)                                  \
    throw std::logic_error("sinter: primitive " #name " has no float64 reference");
#include "ops/op_list.def"
    return t;
  }();
  return table;
}

} // namespace

std::vector<F64Tensor> interpret(const Graph& graph, std::span<const F64Tensor> inputs) {
  const auto& table = primitive_table();
  if (inputs.size() != graph.inputs().size())
    throw std::invalid_argument("sinter: the graph takes " + std::to_string(graph.inputs().size()) +
                                " inputs, got " + std::to_string(inputs.size()));
  std::vector<uint32_t> remaining_uses(graph.size(), 0);
  for (ValueId id = 0; id < graph.size(); ++id)
    for (ValueId in : graph.node(id).inputs)
      ++remaining_uses[in];
  for (const NamedValue& out : graph.outputs())
    ++remaining_uses[out.id];

  std::vector<F64Tensor> values(graph.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const NamedValue& in = graph.inputs()[i];
    const Shape& expected = graph.type(in.id).shape;
    if (inputs[i].shape != expected ||
        inputs[i].data.size() != static_cast<std::size_t>(numel(expected)))
      throw std::invalid_argument("sinter: input '" + in.name + "' should be " +
                                  to_string(graph.type(in.id)) + ", got shape " +
                                  to_string(inputs[i].shape) + " with " +
                                  std::to_string(inputs[i].data.size()) + " values");
    values[in.id] = inputs[i];
  }

  std::vector<F64Tensor> operands;
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    if (n.op == OpId::input) continue;
    if (!is_primitive(n.op))
      throw std::invalid_argument("sinter: interpreter met composite op '" +
                                  std::string(op_name(n.op)) + "' at %" + std::to_string(id) +
                                  " — run the lower pass first");
    operands.clear();
    for (ValueId in : n.inputs)
      operands.push_back(values[in]);
    values[id] = table[static_cast<std::size_t>(n.op)]->reference(operands, n.attrs, n.type);
    // Every value holds what its type can: integers truncate, bf16/f16 round (storage
    // semantics; compiled kernels may keep f32 between fused ops, within the tests' tolerance).
    if (n.type.dtype != DType::f64 && n.type.dtype != DType::f32 && n.type.dtype != DType::boolean)
      for (double& v : values[id].data)
        v = round_to_dtype(v, n.type.dtype);
    for (ValueId in : n.inputs)
      if (--remaining_uses[in] == 0) values[in] = F64Tensor{};
  }

  std::vector<F64Tensor> results;
  for (const NamedValue& out : graph.outputs())
    results.push_back(values[out.id]);
  return results;
}

} // namespace sinter
