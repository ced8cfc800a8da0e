// ops/indexing.cpp — gather (embedding lookup) and its adjoint scatter_add
#include "ops/reference.hpp"
#include "ops/type_rules.hpp"

#include <stdexcept>

namespace sinter::op_defs {
namespace {

using Args = std::span<const F64Tensor>;

int64_t checked_row(double index, int64_t rows, std::string_view op) {
  auto row = static_cast<int64_t>(index);
  if (row < 0 || row >= rows)
    throw std::out_of_range("sinter: " + std::string(op) + " index " + std::to_string(row) +
                            " is outside [0, " + std::to_string(rows) + ")");
  return row;
}

int64_t row_size(const Shape& s) { return s.empty() ? 1 : numel(s) / s[0]; }

} // namespace

// Operands: table [V, D...], integer indices [I...]. Result [I..., D...].
const OpDef gather_op{
    .arity = 2,
    .fusion = FusionCost::index_only,
    .infer =
        [](std::span<const TensorType> in, const Attrs&) {
          if (in[0].shape.empty()) type_rules::fail("gather table needs rank >= 1");
          type_rules::require_integer(in[1], "gather indices");
          Shape out = in[1].shape;
          out.insert(out.end(), in[0].shape.begin() + 1, in[0].shape.end());
          return TensorType{in[0].dtype, out};
        },
    .grad =
        [](const GradArgs& g) {
          Value table = g.operands[0], indices = g.operands[1];
          return std::vector<Value>{scatter_add(indices, g.cotangent, table.shape()[0]), Value{}};
        },
    .reference =
        [](Args in, const Attrs&, const TensorType& result) {
          const F64Tensor& table = in[0];
          int64_t width = row_size(table.shape);
          F64Tensor out{result.shape, {}};
          for (double index : in[1].data) {
            int64_t row = checked_row(index, table.shape[0], "gather");
            out.data.insert(out.data.end(), table.data.begin() + row * width,
                            table.data.begin() + (row + 1) * width);
          }
          return out;
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{TestOperand{DType::f64, {6, 3}}, TestOperand{DType::i32, {4}, 0, 6}}, {}},
              {{TestOperand{DType::f64, {5, 2, 2}}, TestOperand{DType::i64, {2, 3}, 0, 5}}, {}}};
        },
    .row_wise =
        [](std::span<const TensorType> in, std::span<const bool> taken, const Attrs&,
           const TensorType&, int64_t) {
          // Rows of the indices look up rows of a whole table (an embedding).
          return !taken[0] && taken[1] && !in[1].shape.empty();
        },
};

// Operands: integer indices [I...], updates [I..., D...]; attrs: ints = {V}. Result [V, D...]:
// row r is the sum of the update rows whose index is r.
const OpDef scatter_add_op{
    .arity = 2,
    .kernel_kind = KernelKind::scatter_add,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          type_rules::require_integer(in[0], "scatter_add indices");
          const Shape& idx = in[0].shape;
          const Shape& upd = in[1].shape;
          if (a.ints.size() != 1 || a.ints[0] < 0)
            type_rules::fail("scatter_add needs a row count");
          if (upd.size() < idx.size() || !std::equal(idx.begin(), idx.end(), upd.begin()))
            type_rules::fail("updates " + to_string(upd) + " must start with the indices' shape " +
                             to_string(idx));
          Shape out{a.ints[0]};
          out.insert(out.end(), upd.begin() + static_cast<std::ptrdiff_t>(idx.size()), upd.end());
          return TensorType{in[1].dtype, out};
        },
    .grad =
        [](const GradArgs& g) {
          return std::vector<Value>{Value{}, gather(g.cotangent, g.operands[0])};
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType& result) {
          F64Tensor out{result.shape, std::vector<double>(numel(result.shape), 0.0)};
          int64_t width = row_size(result.shape);
          for (std::size_t i = 0; i < in[0].data.size(); ++i) {
            int64_t row = checked_row(in[0].data[i], a.ints[0], "scatter_add");
            for (int64_t k = 0; k < width; ++k)
              out.data[row * width + k] += in[1].data[i * width + k];
          }
          return out;
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{TestOperand{DType::i32, {5}, 0, 3}, TestOperand{DType::f64, {5, 2}}},
               Attrs{.ints = {3}}}};
        },
};

} // namespace sinter::op_defs
