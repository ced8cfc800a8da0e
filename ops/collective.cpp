// ops/collective.cpp — collectives between the ranks of a job as IR ops: all_reduce,
// reduce_scatter, all_gather, broadcast_from
//
// attrs.ints[0] is the number of ranks the graph was built for (the step's world size), so a
// graph's shapes never depend on where it runs; the executable checks it against the
// communicator it is bound to. Reductions sum. Operands are read from contiguous buffers and
// dim 0 is the one split or joined across ranks. The float64 references are the meaning in a
// world of one (the reference interpreter runs no job); every backend runs them through its
// communicator (docs/distributed.md).
#include "ops/reference.hpp"
#include "ops/type_rules.hpp"

namespace sinter::op_defs {
namespace {

using Args = std::span<const F64Tensor>;

int64_t parts_of(const Attrs& a, std::string_view op) {
  if (a.ints.empty() || a.ints[0] < 1)
    type_rules::fail(std::string(op) + " needs the number of ranks (ints[0] >= 1)");
  return a.ints[0];
}

void require_rows(const TensorType& t, std::string_view op) {
  if (t.shape.empty())
    type_rules::fail(std::string(op) + " splits or joins dim 0: the operand needs one, got a "
                                       "scalar (reshape it to [1])");
}

TensorType same_type(std::span<const TensorType> in, const Attrs& a, std::string_view op) {
  parts_of(a, op);
  type_rules::require_numeric(in[0]);
  return in[0];
}

F64Tensor world_of_one(Args in, const Attrs& a, std::string_view op) {
  if (a.ints[0] != 1)
    throw std::invalid_argument("sinter: the reference interpreter runs " + std::string(op) +
                                " in a world of one; this graph was built for " +
                                std::to_string(a.ints[0]) + " ranks");
  return in[0];
}

std::vector<OpTestCase> collective_cases(bool rows) {
  std::vector<OpTestCase> cases{{{{DType::f64, {6}}}, Attrs{.ints = {1}}},
                                {{{DType::f64, {3, 4}}}, Attrs{.ints = {1}}}};
  if (!rows) cases.push_back({{{DType::f64, {}}}, Attrs{.ints = {1}}});
  return cases;
}

} // namespace

// attrs: ints = {ranks}. Every rank gets the sum over ranks of its operand.
const OpDef all_reduce_op{
    .kernel_kind = KernelKind::collective,
    .infer = [](std::span<const TensorType> in,
                const Attrs& a) { return same_type(in, a, "all_reduce"); },
    // Each rank's operand reaches every rank's result: its cotangent is the sum of theirs.
    .grad =
        [](const GradArgs& g) {
          return std::vector<Value>{emit(OpId::all_reduce, {g.cotangent}, g.attrs)};
        },
    .reference = [](Args in, const Attrs& a,
                    const TensorType&) { return world_of_one(in, a, "all_reduce"); },
    .test_cases = [] { return collective_cases(false); },
};

// attrs: ints = {ranks}. Dim 0 (a multiple of ranks) is cut into ranks blocks; rank r gets the
// sum over ranks of block r.
const OpDef reduce_scatter_op{
    .kernel_kind = KernelKind::collective,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          TensorType t = same_type(in, a, "reduce_scatter");
          require_rows(t, "reduce_scatter");
          int64_t parts = a.ints[0];
          if (t.shape[0] % parts != 0)
            type_rules::fail("reduce_scatter over " + std::to_string(parts) +
                             " ranks needs dim 0 a multiple of " + std::to_string(parts) +
                             ", got " + to_string(t.shape) + " (pad it)");
          t.shape[0] /= parts;
          return t;
        },
    .grad =
        [](const GradArgs& g) {
          return std::vector<Value>{emit(OpId::all_gather, {g.cotangent}, g.attrs)};
        },
    .reference = [](Args in, const Attrs& a,
                    const TensorType&) { return world_of_one(in, a, "reduce_scatter"); },
    .test_cases = [] { return collective_cases(true); },
};

// attrs: ints = {ranks}. Every rank gets the operands of all ranks joined along dim 0, in rank
// order.
const OpDef all_gather_op{
    .kernel_kind = KernelKind::collective,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          TensorType t = same_type(in, a, "all_gather");
          require_rows(t, "all_gather");
          t.shape[0] *= a.ints[0];
          return t;
        },
    .grad =
        [](const GradArgs& g) {
          return std::vector<Value>{emit(OpId::reduce_scatter, {g.cotangent}, g.attrs)};
        },
    .reference = [](Args in, const Attrs& a,
                    const TensorType&) { return world_of_one(in, a, "all_gather"); },
    .test_cases = [] { return collective_cases(true); },
};

// attrs: ints = {ranks, root}. Every rank gets rank root's operand.
const OpDef broadcast_from_op{
    .differentiable = false,
    .kernel_kind = KernelKind::collective,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          TensorType t = same_type(in, a, "broadcast_from");
          if (a.ints.size() != 2 || a.ints[1] < 0 || a.ints[1] >= a.ints[0])
            type_rules::fail("broadcast_from needs a root rank below the number of ranks "
                             "(ints = {ranks, root})");
          return t;
        },
    .reference = [](Args in, const Attrs& a,
                    const TensorType&) { return world_of_one(in, a, "broadcast_from"); },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{{{{DType::f64, {5}}}, Attrs{.ints = {1, 0}}},
                                         {{{DType::f64, {2, 3}}}, Attrs{.ints = {1, 0}}}};
        },
};

} // namespace sinter::op_defs
