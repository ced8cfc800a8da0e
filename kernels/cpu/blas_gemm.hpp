// kernels/cpu/blas_gemm.hpp — the GEMM bridge: row-major C = op(A) · op(B) through OpenBLAS
#pragma once
#include "jit/ir/dtype.hpp"

#include <cstdint>

namespace sinter::kernels {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false; ///< A is stored [k, m] / B is stored [n, k]
  /// Row strides of A, B and C in elements; 0 means contiguous (derived from m, n, k). Set
  /// when the GEMM is one row block of a larger one.
  int64_t lda = 0, ldb = 0, ldc = 0;
};

/// C[m, n] = op(A) · op(B), all row-major and contiguous. f32 and f64 go to OpenBLAS
/// (sgemm/dgemm); bf16 and f16 are widened to f32 for sgemm and the result rounded once;
/// integers take a plain loop (they are rare and small here).
void gemm(DType dtype, const GemmShape& shape, const void* a, const void* b, void* c);

/// Threads OpenBLAS may use for one GEMM. sinter runs GEMMs single-threaded inside its own
/// thread pool (row blocks), so OpenBLAS's spinning workers never compete with it.
void set_gemm_threads(int threads);

} // namespace sinter::kernels
