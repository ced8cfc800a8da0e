// kernels/cpu/cpu_attention.hpp — fused attention on the CPU: forward (with the row log-sum-exp)
// and backward, in blocks of query rows, never storing a [Tq, Tk] matrix
#pragma once
#include "jit/ir/dtype.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sinter::kernels {

/// One attention problem: `batches` independent (batch, head) slices of q [Tq, D], k [Tk, D],
/// v [Tk, Dv], all row-major and contiguous, in `dtype` (f64 computes in f64, f32/bf16/f16 in
/// f32). Masked scores are -1e9, as in the op's definition.
struct AttentionProblem {
  DType dtype = DType::f32;
  DType lse_dtype = DType::f32;
  int64_t batches = 0, tq = 0, tk = 0, d = 0, dv = 0;
  double scale = 1.0;
  bool causal = false; ///< query i attends to keys j <= i
  /// Optional bool mask (one byte per element): key j of row i of slice b is kept where
  /// mask[mask_offset[b] + i * mask_row_stride + j * mask_col_stride] != 0.
  const uint8_t* mask = nullptr;
  std::vector<int64_t> mask_offset;
  int64_t mask_row_stride = 0, mask_col_stride = 0;
};

struct AttentionForwardArgs {
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void* o = nullptr;   ///< [Tq, Dv] per slice, or null
  void* lse = nullptr; ///< [Tq] per slice in lse_dtype, or null
};

/// Query rows [begin, end) of the flattened [batches · Tq] (rows are independent).
void attention_forward(const AttentionProblem& p, const AttentionForwardArgs& args, int64_t begin,
                       int64_t end);

struct AttentionBackwardArgs {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *d_o = nullptr;
  const void* lse = nullptr;                        ///< in lse_dtype
  void *dq = nullptr, *dk = nullptr, *dv = nullptr; ///< each optional
};

/// Slices [begin, end): scores recomputed from q, k and the saved log-sum-exp.
void attention_backward(const AttentionProblem& p, const AttentionBackwardArgs& args, int64_t begin,
                        int64_t end);

/// Which build of these kernels runs: "x86-64-v4" (AVX-512), "x86-64-v3" (AVX2 and FMA) or
/// "baseline", by default the best the processor supports (chosen once per process).
const char* attention_kernel_build();
/// The builds this processor can run, best first.
std::vector<std::string> attention_kernel_builds();
/// Runs the kernels through the named build from now on (the tests compare the builds); an
/// unknown or unsupported name throws std::invalid_argument naming the ones that run.
void use_attention_kernel_build(const std::string& name);

} // namespace sinter::kernels
