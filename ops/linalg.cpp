// ops/linalg.cpp — matmul: matrix product over the last two dims, batch dims equal
// (numpy batch broadcasting and shared 2-D weights are resolved by sinter::matmul() first)
#include "ops/reference.hpp"
#include "ops/type_rules.hpp"

namespace sinter::op_defs {
namespace {

Value swap_last_two(Value x) {
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < x.rank(); ++i)
    perm.push_back(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return permute(x, perm);
}

} // namespace

const OpDef matmul_op{
    .arity = 2,
    .precision = Precision::low,
    .kernel_kind = KernelKind::gemm,
    .infer =
        [](std::span<const TensorType> in, const Attrs&) {
          type_rules::require_same_dtype(in);
          type_rules::require_numeric(in[0]);
          const Shape &a = in[0].shape, &b = in[1].shape;
          if (a.size() < 2 || a.size() != b.size())
            type_rules::fail("operands need the same rank >= 2");
          if (!std::equal(a.begin(), a.end() - 2, b.begin())) type_rules::fail("batch dims differ");
          if (a[a.size() - 1] != b[b.size() - 2])
            type_rules::fail("inner dims " + std::to_string(a.back()) + " vs " +
                             std::to_string(b[b.size() - 2]));
          Shape out = a;
          out.back() = b.back();
          return TensorType{in[0].dtype, out};
        },
    .grad =
        [](const GradArgs& g) {
          Value a = g.operands[0], b = g.operands[1], dy = g.cotangent;
          return std::vector<Value>{emit(OpId::matmul, {dy, swap_last_two(b)}),
                                    emit(OpId::matmul, {swap_last_two(a), dy})};
        },
    .reference =
        [](std::span<const F64Tensor> in, const Attrs&, const TensorType& result) {
          const Shape& as = in[0].shape;
          int64_t m = as[as.size() - 2], k = as.back(), n = result.shape.back();
          int64_t batches = numel(as) / (m * k);
          F64Tensor out{result.shape, std::vector<double>(numel(result.shape), 0.0)};
          for (int64_t p = 0; p < batches; ++p)
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < n; ++j)
                for (int64_t q = 0; q < k; ++q)
                  out.data[(p * m + i) * n + j] +=
                      in[0].data[(p * m + i) * k + q] * in[1].data[(p * k + q) * n + j];
          return out;
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{TestOperand{DType::f64, {3, 4}}, TestOperand{DType::f64, {4, 5}}}, {}},
              {{TestOperand{DType::f64, {2, 3, 4}}, TestOperand{DType::f64, {2, 4, 2}}}, {}}};
        },
    .row_wise =
        [](std::span<const TensorType> in, std::span<const bool> taken, const Attrs&,
           const TensorType& result, int64_t) {
          // 2-D: rows of the left operand times a whole right one. Batched: dim 0 is a batch
          // dim of both.
          if (!taken[0] || !row_rules::rows_align(in[0], result)) return false;
          return result.shape.size() == 2 ? !taken[1]
                                          : taken[1] && row_rules::rows_align(in[1], result);
        },
};

} // namespace sinter::op_defs
