// jit/ir/dtype.hpp — element types of tensors: names, sizes and classification
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sinter {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, boolean };

inline constexpr DType all_dtypes[] = {DType::f32, DType::f64, DType::bf16,   DType::f16,
                                       DType::i32, DType::i64, DType::boolean};

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
  case DType::f32: return "f32";
  case DType::f64: return "f64";
  case DType::bf16: return "bf16";
  case DType::f16: return "f16";
  case DType::i32: return "i32";
  case DType::i64: return "i64";
  case DType::boolean: return "bool";
  }
  return "?";
}

constexpr std::size_t dtype_bytes(DType t) {
  switch (t) {
  case DType::f64:
  case DType::i64: return 8;
  case DType::f32:
  case DType::i32: return 4;
  case DType::bf16:
  case DType::f16: return 2;
  case DType::boolean: return 1;
  }
  return 0;
}

constexpr bool is_float(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}
constexpr bool is_integer(DType t) { return t == DType::i32 || t == DType::i64; }

inline std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : all_dtypes)
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

} // namespace sinter
