// kernels/cuda/non_finite_scan.cpp — the PTX of the inf/NaN scan (--check-numerics on a GPU)
#include "kernels/cuda/non_finite_scan.hpp"

#include <algorithm>

namespace sinter::kernels {

std::string_view non_finite_scan_ptx() {
  // Registers: %rd1 data, %rd2 count, %rd3 mask, %rd4 found, %rd7 index, %rd8 stride.
  static constexpr std::string_view ptx = R"(.version 7.0
.target sm_75
.address_size 64

.visible .entry sinter_first_non_finite(
    .param .u64 data, .param .u64 count, .param .u32 element_bytes, .param .u64 mask,
    .param .u64 found)
{
  .reg .pred %p<5>;
  .reg .b16 %h<2>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<16>;

  ld.param.u64 %rd1, [data];
  ld.param.u64 %rd2, [count];
  ld.param.u32 %r1, [element_bytes];
  ld.param.u64 %rd3, [mask];
  ld.param.u64 %rd4, [found];
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd4, %rd4;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mov.u32 %r5, %nctaid.x;
  mul.wide.u32 %rd5, %r2, %r3;
  cvt.u64.u32 %rd6, %r4;
  add.u64 %rd7, %rd5, %rd6;
  mul.wide.u32 %rd8, %r5, %r3;
  cvt.u64.u32 %rd9, %r1;
LOOP:
  setp.ge.u64 %p1, %rd7, %rd2;
  @%p1 bra DONE;
  mad.lo.u64 %rd10, %rd7, %rd9, %rd1;
  setp.eq.u32 %p2, %r1, 2;
  @%p2 bra TWO;
  setp.eq.u32 %p3, %r1, 4;
  @%p3 bra FOUR;
  ld.global.u64 %rd11, [%rd10];
  bra TEST;
TWO:
  ld.global.u16 %h1, [%rd10];
  cvt.u64.u16 %rd11, %h1;
  bra TEST;
FOUR:
  ld.global.u32 %r6, [%rd10];
  cvt.u64.u32 %rd11, %r6;
TEST:
  and.b64 %rd12, %rd11, %rd3;
  setp.ne.u64 %p4, %rd12, %rd3;
  @%p4 bra NEXT;
  not.b64 %rd14, %rd7;
  atom.global.max.u64 %rd13, [%rd4], %rd14;
NEXT:
  add.u64 %rd7, %rd7, %rd8;
  bra LOOP;
DONE:
  ret;
}
)";
  return ptx;
}

uint64_t exponent_mask(DType dtype) {
  switch (dtype) {
  case DType::f16: return 0x7C00;
  case DType::bf16: return 0x7F80;
  case DType::f32: return 0x7F80'0000;
  case DType::f64: return 0x7FF0'0000'0000'0000;
  default: return 0;
  }
}

ScanGrid non_finite_scan_grid(int64_t count) {
  ScanGrid grid;
  // Enough blocks to fill a large GPU; beyond that each thread walks several elements.
  grid.blocks = static_cast<unsigned>(std::clamp<int64_t>((count + 255) / 256, 1, 1024));
  return grid;
}

} // namespace sinter::kernels
