// jit/runtime/host_tensor.hpp — HostTensor: a typed, dense, row-major tensor in host memory
#pragma once
#include "jit/ir/dtype.hpp"
#include "jit/ir/shape.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace sinter {

/// Owns its bytes. Values convert to and from double at the edges (tests, printing, the
/// float64 interpreter); bf16/f16 round to nearest even.
class HostTensor {
public:
  HostTensor() = default;
  HostTensor(DType dtype, Shape shape);

  /// A tensor of `dtype` holding `values` (converted, rounded for narrow types).
  static HostTensor from_doubles(DType dtype, Shape shape, std::span<const double> values);
  template <class T>
  static HostTensor from(DType dtype, Shape shape, const std::vector<T>& values) {
    std::vector<double> d(values.begin(), values.end());
    return from_doubles(dtype, std::move(shape), d);
  }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return numel(shape_); }
  std::span<std::byte> bytes() { return bytes_; }
  std::span<const std::byte> bytes() const { return bytes_; }

  double at(int64_t flat_index) const;
  void set(int64_t flat_index, double value);
  std::vector<double> to_doubles() const;
  /// `f32[2,3] {1, 2, 3, 4, 5, 6}` (elided past `max_values`).
  std::string to_string(std::size_t max_values = 16) const;

private:
  DType dtype_ = DType::f32;
  Shape shape_;
  std::vector<std::byte> bytes_;
};

/// Round-trip of a double through a narrow float format (nearest even).
float round_to_bf16(float v);
float round_to_f16(float v);

} // namespace sinter
