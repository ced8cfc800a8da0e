// ops/registry.cpp — the table of OpDefs indexed by OpId, generated from ops/op_list.def
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

} // namespace sinter
