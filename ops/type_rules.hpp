// ops/type_rules.hpp — shared shape/dtype rules and attribute checks used by the op files
#pragma once
#include "ops/registry.hpp"

#include <algorithm>
#include <string>

namespace sinter::type_rules {

[[noreturn]] inline void fail(const std::string& why) { throw ShapeError(why); }

inline void require_same_dtype(std::span<const TensorType> in, std::size_t from = 0) {
  for (std::size_t i = from + 1; i < in.size(); ++i)
    if (in[i].dtype != in[from].dtype)
      fail("operand dtypes differ: " + std::string(dtype_name(in[from].dtype)) + " vs " +
           std::string(dtype_name(in[i].dtype)) + " — cast one operand");
}

inline void require_same_shape(std::span<const TensorType> in, std::size_t from = 0) {
  for (std::size_t i = from + 1; i < in.size(); ++i)
    if (in[i].shape != in[from].shape)
      fail("operand shapes differ: " + to_string(in[from].shape) + " vs " + to_string(in[i].shape));
}

inline void require_float(const TensorType& t, std::string_view what = "operand") {
  if (!is_float(t.dtype))
    fail(std::string(what) + " must be floating point, got " + std::string(dtype_name(t.dtype)) +
         " — cast it first");
}

inline void require_integer(const TensorType& t, std::string_view what) {
  if (!is_integer(t.dtype))
    fail(std::string(what) + " must be i32 or i64, got " + std::string(dtype_name(t.dtype)));
}

inline void require_numeric(const TensorType& t) {
  if (t.dtype == DType::boolean) fail("operand must be numeric, got bool — cast it first");
}

/// Elementwise ops: operands already broadcast to one shape, same dtype; result = operand type.
inline TensorType same_as_operands(std::span<const TensorType> in, const Attrs&) {
  require_same_dtype(in);
  require_same_shape(in);
  require_numeric(in[0]);
  return in[0];
}

inline TensorType float_same_as_operands(std::span<const TensorType> in, const Attrs& a) {
  TensorType t = same_as_operands(in, a);
  require_float(t);
  return t;
}

inline TensorType comparison(std::span<const TensorType> in, const Attrs& a) {
  TensorType t = same_as_operands(in, a);
  return TensorType{DType::boolean, t.shape};
}

inline int64_t axis(int64_t a, std::size_t rank) {
  auto n = normalize_axis(a, rank);
  if (!n) fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return *n;
}

/// Sorted, unique, non-negative axes; empty input means all axes.
inline std::vector<int64_t> axes(const std::vector<int64_t>& requested, std::size_t rank) {
  std::vector<int64_t> out;
  if (requested.empty())
    for (std::size_t i = 0; i < rank; ++i)
      out.push_back(static_cast<int64_t>(i));
  for (int64_t a : requested)
    out.push_back(axis(a, rank));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) fail("an axis is repeated");
  return out;
}

/// Shape after reducing `axes` (normalised), keeping them as size 1 when keepdims.
inline Shape reduced_shape(const Shape& s, const std::vector<int64_t>& axes, bool keepdims) {
  Shape out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) != axes.end();
    if (!reduced)
      out.push_back(s[i]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

} // namespace sinter::type_rules

/// OpDef::row_wise rules shared by the op files.
namespace sinter::row_rules {

/// A taken operand's rows are the result's: same rank, same dim 0.
inline bool rows_align(const TensorType& operand, const TensorType& result) {
  return !result.shape.empty() && operand.shape.size() == result.shape.size() &&
         operand.shape[0] == result.shape[0];
}

/// An operand used whole must be the same for every row: it has no dim 0 of the result's
/// (lower rank, numpy alignment from the right) or broadcasts along it (size 1).
inline bool same_for_every_row(const TensorType& operand, const TensorType& result) {
  return operand.shape.size() < result.shape.size() ||
         (!operand.shape.empty() && operand.shape[0] == 1);
}

/// Ops computed element by element (operands broadcast to the result): row i of the result
/// reads row i of every taken operand and only whole operands that repeat along dim 0.
inline bool elementwise(std::span<const TensorType> in, std::span<const bool> taken, const Attrs&,
                        const TensorType& result, int64_t) {
  bool any = false;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (taken[i] ? !rows_align(in[i], result) : !same_for_every_row(in[i], result)) return false;
    any = any || taken[i];
  }
  return any;
}

/// One operand, taken, whose dim 0 stays the result's dim 0 (reductions over other axes,
/// reshapes that keep dim 0, permutations that keep it first, slices and pads that leave it).
inline bool keeps_dim0(std::span<const TensorType> in, std::span<const bool> taken,
                       const TensorType& result) {
  return in.size() == 1 && taken[0] && !in[0].shape.empty() && !result.shape.empty() &&
         in[0].shape[0] == result.shape[0];
}

} // namespace sinter::row_rules
