// ops/layout.cpp — reshape, permute, transpose, broadcast, broadcast_to, slice, pad, concat
#include "ops/reference.hpp"
#include "ops/type_rules.hpp"

#include <numeric>

namespace sinter::op_defs {
namespace {

using Args = std::span<const F64Tensor>;
using reference::ravel;
using reference::unravel;

std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i)
    inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

std::vector<int64_t> checked_permutation(const std::vector<int64_t>& perm, std::size_t rank) {
  if (perm.size() != rank)
    type_rules::fail("permutation has " + std::to_string(perm.size()) + " entries for rank " +
                     std::to_string(rank));
  std::vector<int64_t> out;
  for (int64_t p : perm)
    out.push_back(type_rules::axis(p, rank));
  std::vector<int64_t> sorted = out;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < rank; ++i)
    if (sorted[i] != static_cast<int64_t>(i)) type_rules::fail("not a permutation");
  return out;
}

std::vector<int64_t> transpose_permutation(const Attrs& a, std::size_t rank) {
  if (a.ints.size() != 2) type_rules::fail("transpose takes two axes");
  std::vector<int64_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[type_rules::axis(a.ints[0], rank)], perm[type_rules::axis(a.ints[1], rank)]);
  return perm;
}

F64Tensor permute_reference(const F64Tensor& x, const std::vector<int64_t>& perm) {
  Shape out_shape;
  for (int64_t p : perm)
    out_shape.push_back(x.shape[p]);
  F64Tensor out{out_shape, std::vector<double>(x.data.size())};
  for (int64_t i = 0; i < numel(out_shape); ++i) {
    auto oi = unravel(i, out_shape);
    std::vector<int64_t> xi(perm.size());
    for (std::size_t d = 0; d < perm.size(); ++d)
      xi[perm[d]] = oi[d];
    out.data[i] = x.data[ravel(xi, x.shape)];
  }
  return out;
}

TensorType broadcast_type(std::span<const TensorType> in, const Attrs& a) {
  const Shape& from = in[0].shape;
  const Shape& to = a.ints;
  if (from.size() > to.size())
    type_rules::fail("cannot broadcast rank " + std::to_string(from.size()) + " to rank " +
                     std::to_string(to.size()));
  std::size_t offset = to.size() - from.size();
  for (std::size_t i = 0; i < from.size(); ++i)
    if (from[i] != to[offset + i] && from[i] != 1)
      type_rules::fail("cannot broadcast " + to_string(from) + " to " + to_string(to) + " (dim " +
                       std::to_string(i) + " is neither equal nor 1)");
  return TensorType{in[0].dtype, to};
}

Value broadcast_cotangent(const GradArgs& g) {
  const Shape& from = g.operands[0].shape();
  const Shape& to = g.result.shape();
  std::size_t offset = to.size() - from.size();
  std::vector<int64_t> axes;
  for (std::size_t i = 0; i < to.size(); ++i)
    if (i < offset || (from[i - offset] == 1 && to[i] != 1))
      axes.push_back(static_cast<int64_t>(i));
  Value dy = g.cotangent;
  if (!axes.empty()) dy = emit(OpId::reduce_sum, {dy}, Attrs{.ints = axes});
  return reshape(dy, from);
}

void check_slice(const Shape& s, const Attrs& a) {
  if (a.ints.size() != s.size() || a.ints2.size() != s.size())
    type_rules::fail("slice needs one start and one limit per dim (rank " +
                     std::to_string(s.size()) + ")");
  for (std::size_t i = 0; i < s.size(); ++i)
    if (a.ints[i] < 0 || a.ints[i] > a.ints2[i] || a.ints2[i] > s[i])
      type_rules::fail("slice [" + std::to_string(a.ints[i]) + ":" + std::to_string(a.ints2[i]) +
                       ") is outside dim " + std::to_string(i) + " of size " +
                       std::to_string(s[i]));
}

} // namespace

// attrs: ints = result shape (same element count).
const OpDef reshape_op{
    .arity = 1,
    .foldable = true,
    .fusion = FusionCost::index_only,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          for (int64_t d : a.ints)
            if (d < 0) type_rules::fail("negative dimension in " + to_string(a.ints));
          if (numel(a.ints) != numel(in[0].shape))
            type_rules::fail("cannot reshape " + std::to_string(numel(in[0].shape)) +
                             " elements into " + to_string(a.ints));
          return TensorType{in[0].dtype, a.ints};
        },
    .grad =
        [](const GradArgs& g) {
          return std::vector<Value>{reshape(g.cotangent, g.operands[0].shape())};
        },
    .reference = [](Args in, const Attrs& a,
                    const TensorType&) { return F64Tensor{a.ints, in[0].data}; },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{TestOperand{DType::f64, {3, 4}}}, Attrs{.ints = {2, 6}}},
              {{TestOperand{DType::f64, {2, 3, 4}}}, Attrs{.ints = {24}}},
              {{TestOperand{DType::f64, {3, 2, 4}}}, Attrs{.ints = {3, 8}}}, // keeps dim 0
              {{TestOperand{DType::f64, {3, 2, 4}}}, Attrs{.ints = {6, 4}}}, // rows in groups
              {{TestOperand{DType::f64, {}}}, Attrs{.ints = {1, 1}}}};
        },
    .row_wise =
        [](std::span<const TensorType> in, std::span<const bool> taken, const Attrs&,
           const TensorType& result, int64_t groups) {
          // Row-major: each group's consecutive elements stay one group's, whatever the dims,
          // while both dim 0s hold whole groups ([B, T, C] to [B·T, C] and back).
          return in.size() == 1 && taken[0] && !in[0].shape.empty() && !result.shape.empty() &&
                 groups > 0 && in[0].shape[0] % groups == 0 && result.shape[0] % groups == 0;
        },
};

// attrs: ints = permutation; result dim i is operand dim perm[i].
const OpDef permute_op{
    .arity = 1,
    .foldable = true,
    .fusion = FusionCost::index_only,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          auto perm = checked_permutation(a.ints, in[0].shape.size());
          Shape out;
          for (int64_t p : perm)
            out.push_back(in[0].shape[p]);
          return TensorType{in[0].dtype, out};
        },
    .grad =
        [](const GradArgs& g) {
          auto perm = checked_permutation(g.attrs.ints, g.operands[0].shape().size());
          return std::vector<Value>{permute(g.cotangent, inverse_permutation(perm))};
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType&) {
          return permute_reference(in[0], checked_permutation(a.ints, in[0].shape.size()));
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{TestOperand{DType::f64, {2, 3, 4}}}, Attrs{.ints = {2, 0, 1}}},
              {{TestOperand{DType::f64, {3, 2, 4}}}, Attrs{.ints = {0, 2, 1}}}, // keeps dim 0
              {{TestOperand{DType::f64, {3, 5}}}, Attrs{.ints = {1, 0}}}};
        },
    .row_wise =
        [](std::span<const TensorType> in, std::span<const bool> taken, const Attrs& a,
           const TensorType& result,
           int64_t) { return row_rules::keeps_dim0(in, taken, result) && a.ints.at(0) == 0; },
};

// attrs: ints = {axis_a, axis_b}: swaps two dims.
const OpDef transpose_op{
    .arity = 1,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          auto perm = transpose_permutation(a, in[0].shape.size());
          Shape out;
          for (int64_t p : perm)
            out.push_back(in[0].shape[p]);
          return TensorType{in[0].dtype, out};
        },
    .lower =
        [](std::span<const Value> in, const Attrs& a) {
          return permute(in[0], transpose_permutation(a, in[0].shape().size()));
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType&) {
          return permute_reference(in[0], transpose_permutation(a, in[0].shape.size()));
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{TestOperand{DType::f64, {2, 3, 4}}}, Attrs{.ints = {-2, -1}}},
              {{TestOperand{DType::f64, {2, 3, 4}}}, Attrs{.ints = {0, 2}}}};
        },
};

// attrs: ints = result shape; numpy rules (operand right-aligned, size-1 dims stretch).
const OpDef broadcast_op{
    .arity = 1,
    .foldable = true,
    .fusion = FusionCost::index_only,
    .infer = broadcast_type,
    .grad = [](const GradArgs& g) { return std::vector<Value>{broadcast_cotangent(g)}; },
    .reference =
        [](Args in, const Attrs&, const TensorType& result) {
          return reference::map(in, result.shape,
                                [](const std::vector<double>& v) { return v[0]; });
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{TestOperand{DType::f64, {3, 1}}}, Attrs{.ints = {2, 3, 4}}},
              {{TestOperand{DType::f64, {}}}, Attrs{.ints = {2, 2}}},
              {{TestOperand{DType::f64, {4}}}, Attrs{.ints = {3, 4}}}};
        },
    .row_wise =
        [](std::span<const TensorType> in, std::span<const bool> taken, const Attrs&,
           const TensorType& result, int64_t) {
          // Whole, an operand that repeats along dim 0 gives the same rows at any row count.
          return taken[0] ? row_rules::rows_align(in[0], result)
                          : row_rules::same_for_every_row(in[0], result);
        },
};

const OpDef broadcast_to_op{
    .arity = 1,
    .infer = broadcast_type,
    .lower =
        [](std::span<const Value> in, const Attrs& a) {
          return in[0].shape() == a.ints ? in[0] : emit(OpId::broadcast, {in[0]}, a);
        },
    .reference = broadcast_op.reference,
    .test_cases = broadcast_op.test_cases,
};

// attrs: ints = starts, ints2 = limits (exclusive), one per dim, step 1.
const OpDef slice_op{
    .arity = 1,
    .fusion = FusionCost::index_only,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          check_slice(in[0].shape, a);
          Shape out;
          for (std::size_t i = 0; i < a.ints.size(); ++i)
            out.push_back(a.ints2[i] - a.ints[i]);
          return TensorType{in[0].dtype, out};
        },
    .grad =
        [](const GradArgs& g) {
          const Shape& s = g.operands[0].shape();
          std::vector<int64_t> high;
          for (std::size_t i = 0; i < s.size(); ++i)
            high.push_back(s[i] - g.attrs.ints2[i]);
          return std::vector<Value>{pad(g.cotangent, g.attrs.ints, high)};
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType& result) {
          F64Tensor out{result.shape, std::vector<double>(numel(result.shape))};
          for (int64_t i = 0; i < numel(result.shape); ++i) {
            auto idx = unravel(i, result.shape);
            for (std::size_t d = 0; d < idx.size(); ++d)
              idx[d] += a.ints[d];
            out.data[i] = in[0].data[ravel(idx, in[0].shape)];
          }
          return out;
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{TestOperand{DType::f64, {5, 6}}}, Attrs{.ints = {1, 2}, .ints2 = {4, 6}}},
              {{TestOperand{DType::f64, {3, 6}}}, Attrs{.ints = {0, 1}, .ints2 = {3, 4}}},
              {{TestOperand{DType::f64, {4}}}, Attrs{.ints = {0}, .ints2 = {2}}}};
        },
    .row_wise = [](std::span<const TensorType> in, std::span<const bool> taken, const Attrs&,
                   const TensorType& result,
                   int64_t) { return row_rules::keeps_dim0(in, taken, result); },
};

// attrs: ints = zeros added before, ints2 = zeros added after, one per dim.
const OpDef pad_op{
    .arity = 1,
    .fusion = FusionCost::index_only,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          const Shape& s = in[0].shape;
          if (a.ints.size() != s.size() || a.ints2.size() != s.size())
            type_rules::fail("pad needs one low and one high amount per dim");
          Shape out;
          for (std::size_t i = 0; i < s.size(); ++i) {
            if (a.ints[i] < 0 || a.ints2[i] < 0) type_rules::fail("pad amounts must be >= 0");
            out.push_back(s[i] + a.ints[i] + a.ints2[i]);
          }
          return TensorType{in[0].dtype, out};
        },
    .grad =
        [](const GradArgs& g) {
          const Shape& s = g.operands[0].shape();
          std::vector<int64_t> limits;
          for (std::size_t i = 0; i < s.size(); ++i)
            limits.push_back(g.attrs.ints[i] + s[i]);
          return std::vector<Value>{slice(g.cotangent, g.attrs.ints, limits)};
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType& result) {
          F64Tensor out{result.shape, std::vector<double>(numel(result.shape), 0.0)};
          for (int64_t i = 0; i < numel(in[0].shape); ++i) {
            auto idx = unravel(i, in[0].shape);
            for (std::size_t d = 0; d < idx.size(); ++d)
              idx[d] += a.ints[d];
            out.data[ravel(idx, result.shape)] = in[0].data[i];
          }
          return out;
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{TestOperand{DType::f64, {2, 3}}}, Attrs{.ints = {1, 0}, .ints2 = {0, 2}}},
              {{TestOperand{DType::f64, {3, 2}}}, Attrs{.ints = {0, 1}, .ints2 = {0, 2}}}};
        },
    .row_wise = [](std::span<const TensorType> in, std::span<const bool> taken, const Attrs&,
                   const TensorType& result,
                   int64_t) { return row_rules::keeps_dim0(in, taken, result); },
};

// attrs: ints = {axis}. Any number of operands, equal except along axis.
const OpDef concat_op{
    .arity = -1,
    .fusion = FusionCost::index_only,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          type_rules::require_same_dtype(in);
          if (a.ints.size() != 1) type_rules::fail("concat takes one axis");
          int64_t axis = type_rules::axis(a.ints[0], in[0].shape.size());
          Shape out = in[0].shape;
          for (std::size_t k = 1; k < in.size(); ++k) {
            Shape s = in[k].shape;
            if (s.size() != out.size()) type_rules::fail("concat operands differ in rank");
            for (std::size_t d = 0; d < s.size(); ++d)
              if (static_cast<int64_t>(d) != axis && s[d] != out[d])
                type_rules::fail("concat operands differ in dim " + std::to_string(d) +
                                 " (only the concat axis may differ)");
            out[axis] += s[axis];
          }
          return TensorType{in[0].dtype, out};
        },
    .grad =
        [](const GradArgs& g) {
          int64_t axis = type_rules::axis(g.attrs.ints[0], g.result.shape().size());
          std::vector<Value> grads;
          int64_t offset = 0;
          for (const Value& part : g.operands) {
            std::vector<int64_t> starts(part.shape().size(), 0);
            std::vector<int64_t> limits = g.result.shape();
            starts[axis] = offset;
            limits[axis] = offset + part.shape()[axis];
            offset = limits[axis];
            grads.push_back(slice(g.cotangent, starts, limits));
          }
          return grads;
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType& result) {
          int64_t axis = *normalize_axis(a.ints[0], result.shape.size());
          F64Tensor out{result.shape, std::vector<double>(numel(result.shape))};
          int64_t offset = 0;
          for (const F64Tensor& part : in) {
            for (int64_t i = 0; i < numel(part.shape); ++i) {
              auto idx = unravel(i, part.shape);
              idx[axis] += offset;
              out.data[ravel(idx, result.shape)] = part.data[i];
            }
            offset += part.shape[axis];
          }
          return out;
        },
    .test_cases =
        [] {
          return std::vector<OpTestCase>{
              {{TestOperand{DType::f64, {2, 3}}, TestOperand{DType::f64, {4, 3}}},
               Attrs{.ints = {0}}},
              {{TestOperand{DType::f64, {2, 3}}, TestOperand{DType::f64, {2, 1}},
                TestOperand{DType::f64, {2, 2}}},
               Attrs{.ints = {-1}}}};
        },
    .row_wise =
        [](std::span<const TensorType> in, std::span<const bool> taken, const Attrs& a,
           const TensorType& result, int64_t) {
          for (std::size_t i = 0; i < in.size(); ++i)
            if (!taken[i] || !row_rules::rows_align(in[i], result)) return false;
          return type_rules::axis(a.ints.at(0), result.shape.size()) != 0;
        },
};

} // namespace sinter::op_defs
