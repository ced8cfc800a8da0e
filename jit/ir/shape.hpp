// jit/ir/shape.hpp — tensor shapes (row-major dims) and the numpy broadcasting rule
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sinter {

using Shape = std::vector<int64_t>;

inline std::string to_string(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

/// Elements of a shape; a count past int64 (a shape no memory holds) throws, naming it.
inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n))
      throw std::overflow_error("sinter: the shape " + to_string(s) +
                                " has more elements than a 64-bit count holds; check the sizes "
                                "it was built from");
  return n;
}

/// Row-major strides of a shape, in elements.
inline std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (std::size_t i = s.size(); i-- > 1;)
    st[i - 1] = st[i] * s[i];
  return st;
}

/// numpy broadcasting of two shapes (right-aligned, size-1 dims stretch); nullopt if incompatible.
inline std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// Normalises a possibly negative axis against a rank; nullopt if out of range.
inline std::optional<int64_t> normalize_axis(int64_t axis, std::size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) return std::nullopt;
  return axis < 0 ? axis + r : axis;
}

} // namespace sinter
