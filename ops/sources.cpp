// ops/sources.cpp — ops without operands: graph inputs, splat constants and iota
#include "ops/reference.hpp"
#include "ops/type_rules.hpp"

namespace sinter::op_defs {
namespace {

void require_valid_shape(const Shape& s) {
  for (int64_t d : s)
    if (d < 0) type_rules::fail("negative dimension in shape " + to_string(s));
}

TensorType type_from_attrs(std::span<const TensorType>, const Attrs& a) {
  require_valid_shape(a.ints);
  return TensorType{a.dtype, a.ints};
}

} // namespace

// attrs: ints = shape, ints2 = {position in the graph's input list}, dtype.
const OpDef input_op{
    .arity = 0,
    .differentiable = false,
    .infer = type_from_attrs,
};

// attrs: ints = shape, real = the value every element holds, dtype.
const OpDef constant_op{
    .arity = 0,
    .differentiable = false,
    .fusion = FusionCost::index_only,
    .infer = type_from_attrs,
    .reference =
        [](std::span<const F64Tensor>, const Attrs& a, const TensorType& result) {
          return F64Tensor{result.shape, std::vector<double>(numel(result.shape), a.real)};
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{{{}, Attrs{.ints = {2, 3}, .real = 1.5}},
                                         {{}, Attrs{.ints = {}, .real = -4}}};
        },
};

// attrs: ints = shape, ints2 = {axis}, dtype. Element = its index along `axis`.
const OpDef iota_op{
    .arity = 0,
    .differentiable = false,
    .fusion = FusionCost::index_only,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          TensorType t = type_from_attrs(in, a);
          if (a.ints2.size() != 1) type_rules::fail("iota needs one axis");
          type_rules::axis(a.ints2[0], t.shape.size());
          if (a.dtype == DType::boolean) type_rules::fail("iota cannot produce bool");
          return t;
        },
    .reference =
        [](std::span<const F64Tensor>, const Attrs& a, const TensorType& result) {
          F64Tensor out{result.shape, std::vector<double>(numel(result.shape))};
          int64_t axis = *normalize_axis(a.ints2[0], result.shape.size());
          for (int64_t i = 0; i < numel(result.shape); ++i)
            out.data[i] = static_cast<double>(reference::unravel(i, result.shape)[axis]);
          return out;
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{}, Attrs{.ints = {3, 4}, .ints2 = {1}, .dtype = DType::i32}},
              {{}, Attrs{.ints = {2, 3, 2}, .ints2 = {-3}, .dtype = DType::f32}}};
        },
};

} // namespace sinter::op_defs
