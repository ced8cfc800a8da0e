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
