// kernels/cuda/non_finite_scan.hpp — the hand-written PTX kernel that --check-numerics runs after
// each GPU kernel: the first element of a floating-point buffer that is inf or NaN
#pragma once
#include "jit/ir/dtype.hpp"

#include <cstdint>
#include <optional>
#include <string_view>

namespace sinter::kernels {

/// The kernel's name in non_finite_scan_ptx().
inline constexpr std::string_view non_finite_scan_symbol = "sinter_first_non_finite";

/// PTX (ISA 7.0, sm_75 and newer, what CUDA 13 supports: the driver compiles it for the GPU at
/// hand) of `sinter_first_non_finite(u64 data, u64 count, u32 element_bytes, u64 exponent_mask, u64
/// found)`: every thread walks the `count` elements of `element_bytes` (2, 4 or 8) at `data`
/// grid-stride, and an element whose exponent bits are all set (inf or NaN) raises the u64 at
/// `found`, which starts at 0, to ~index with an atomic maximum: 0 afterwards means none, otherwise
/// ~found is the first such index (first_non_finite_index).
std::string_view non_finite_scan_ptx();

/// The index a scan's `found` word names: nullopt for 0 (no inf or NaN).
inline std::optional<uint64_t> first_non_finite_index(uint64_t found) {
  return found ? std::optional<uint64_t>(~found) : std::nullopt;
}

/// The exponent bits of `dtype` (inf and NaN have them all set); 0 for a type that is not
/// floating-point (nothing to scan).
uint64_t exponent_mask(DType dtype);

/// Blocks and threads per block of a scan over `count` elements.
struct ScanGrid {
  unsigned blocks = 1, threads = 256;
};
ScanGrid non_finite_scan_grid(int64_t count);

} // namespace sinter::kernels
