// ops/registry.cpp — the table of OpDefs indexed by OpId, generated from ops/op_list.def
// Also the type verifier, which needs every op's rule.
#include "ops/registry.hpp"

namespace sinter {
namespace {

const OpDef* const op_table[] = {
#define SINTER_PRIMITIVE(name) &op_defs::name##_op,
#define SINTER_COMPOSITE(name) &op_defs::name##_op,
#include "ops/op_list.def"
};
static_assert(std::size(op_table) == num_ops, "every op in op_list.def needs an OpDef");

} // namespace

const OpDef& op_def(OpId op) { return *op_table[static_cast<std::size_t>(op)]; }

std::optional<OpId> op_by_name(std::string_view name) {
  for (std::size_t i = 0; i < num_ops; ++i)
    if (op_names[i] == name) return static_cast<OpId>(i);
  return std::nullopt;
}

void verify(const Graph& graph) {
  graph.verify();
  for (ValueId id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    auto fail = [&](const std::string& what) {
      throw VerifyError("sinter: IR verification failed at %" + std::to_string(id) + " (" +
                        std::string(op_name(n.op)) + "): " + what);
    };
    const OpDef& def = op_def(n.op);
    if (def.arity >= 0 && n.inputs.size() != static_cast<std::size_t>(def.arity))
      fail("expects " + std::to_string(def.arity) + " operands, has " +
           std::to_string(n.inputs.size()));
    std::vector<TensorType> operand_types;
    for (ValueId in : n.inputs)
      operand_types.push_back(graph.type(in));
    TensorType expected;
    try {
      expected = def.infer(operand_types, n.attrs);
    } catch (const ShapeError& e) {
      fail(e.what());
    }
    if (!(expected == n.type))
      fail("stored type " + to_string(n.type) + " but operands give " + to_string(expected));
  }
}

} // namespace sinter
