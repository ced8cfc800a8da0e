// jit/ir/half.hpp — bit-exact bf16 and f16 conversions to and from f32 (round to nearest even)
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace sinter {

inline uint16_t bf16_bits(float v) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  if (std::isnan(v)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1); // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_value(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

/// f32 → f16, round to nearest even, on the bits (no libm: GEMM staging converts whole
/// matrices). Overflow gives infinity, tiny values become subnormal, NaN stays NaN.
inline uint16_t f16_bits(float v) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  auto sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;  // NaN
  if (a >= 0x47800000u) return sign | 0x7c00; // >= 65536 (and infinity): too large
  if (a < 0x38800000u) {                      // below 2^-14: subnormal or zero in f16
    // Adding 0.5 puts the value's multiples of 2^-24 in the low mantissa bits of a float in
    // [0.5, 1), rounded to nearest even by the float addition itself.
    uint32_t rounded = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f);
    return sign | static_cast<uint16_t>(rounded - 0x3f000000u);
  }
  // Normal: rebias the exponent (127 → 15), round the 13 dropped mantissa bits to nearest
  // even; a carry into the exponent is the right result (up to 65504 → infinity at 65520).
  uint32_t odd = (a >> 13) & 1u;
  a += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
  return sign | static_cast<uint16_t>(a >> 13);
}

/// f16 → f32 (exact), on the bits.
inline float f16_value(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) { // zero or subnormal: mantissa · 2^-24, exact in f32
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

} // namespace sinter
