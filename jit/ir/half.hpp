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

inline uint16_t f16_bits(float v) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  float a = std::fabs(v);
  if (std::isnan(v)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00; // overflows to infinity
  if (a < 6.103515625e-05f) {              // subnormal: multiples of 2^-24
    auto m = static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
    return sign | m;
  }
  int e;
  float m = std::frexp(a, &e); // a = m * 2^e, m in [0.5, 1)
  auto mant = static_cast<uint32_t>(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  int exp = e - 1 + 15;
  if (mant == 1024) {
    mant = 0;
    ++exp;
  }
  if (exp >= 31) return sign | 0x7c00;
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}

inline float f16_value(uint16_t h) {
  int sign = (h & 0x8000) ? -1 : 1;
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  if (exp == 0) return static_cast<float>(sign * std::ldexp(mant, -24));
  if (exp == 31) return mant ? NAN : sign * INFINITY;
  return static_cast<float>(sign * std::ldexp(1024 + mant, exp - 25));
}

} // namespace sinter
