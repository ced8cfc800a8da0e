// kernels/cpu/blas_gemm.cpp — OpenBLAS sgemm/dgemm calls (bf16/f16 staged through f32), integer
// loop
#include "kernels/cpu/blas_gemm.hpp"

#include "jit/ir/half.hpp"

#include <cblas.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace sinter::kernels {
namespace {

double load(DType t, const void* base, int64_t i) {
  const auto* p = static_cast<const std::byte*>(base);
  switch (t) {
  case DType::i32: {
    int32_t v;
    std::memcpy(&v, p + i * 4, 4);
    return v;
  }
  case DType::i64: {
    int64_t v;
    std::memcpy(&v, p + i * 8, 8);
    return static_cast<double>(v);
  }
  default: break;
  }
  throw std::invalid_argument("sinter: matmul on " + std::string(dtype_name(t)) +
                              " is not supported by the CPU backend yet — cast to f32 first");
}

void store(DType t, void* base, int64_t i, double v) {
  auto* p = static_cast<std::byte*>(base);
  if (t == DType::i32) {
    auto x = static_cast<int32_t>(v);
    std::memcpy(p + i * 4, &x, 4);
  } else {
    auto x = static_cast<int64_t>(v);
    std::memcpy(p + i * 8, &x, 8);
  }
}

/// `rows` x `cols` bf16/f16 elements with row stride `ld`, widened into `out` (contiguous).
void widen(DType t, const void* in, int64_t rows, int64_t cols, int64_t ld,
           std::vector<float>& out) {
  out.resize(static_cast<std::size_t>(rows * cols));
  const auto* p = static_cast<const uint16_t*>(in);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<std::size_t>(r * cols + c)] =
          t == DType::bf16 ? bf16_value(p[r * ld + c]) : f16_value(p[r * ld + c]);
}

/// Half-precision GEMM: operands widened to f32, one sgemm (f32 accumulation), the result
/// rounded once to the storage type. Debian's OpenBLAS has no bf16 GEMM (sbgemm) built in.
void half_gemm(DType t, const GemmShape& s, const void* a, const void* b, void* c, int64_t lda,
               int64_t ldb, int64_t ldc) {
  thread_local std::vector<float> wa, wb, wc;
  widen(t, a, s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k, lda, wa);
  widen(t, b, s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n, ldb, wb);
  wc.resize(static_cast<std::size_t>(s.m * s.n));
  auto m = static_cast<blasint>(s.m), n = static_cast<blasint>(s.n), k = static_cast<blasint>(s.k);
  cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
              s.trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, wa.data(), s.trans_a ? m : k,
              wb.data(), s.trans_b ? k : n, 0.0f, wc.data(), n);
  auto* out = static_cast<uint16_t*>(c);
  for (int64_t r = 0; r < s.m; ++r)
    for (int64_t q = 0; q < s.n; ++q) {
      float v = wc[static_cast<std::size_t>(r * s.n + q)];
      out[r * ldc + q] = t == DType::bf16 ? bf16_bits(v) : f16_bits(v);
    }
}

} // namespace

void gemm(DType dtype, const GemmShape& s, const void* a, const void* b, void* c) {
  auto ta = s.trans_a ? CblasTrans : CblasNoTrans;
  auto tb = s.trans_b ? CblasTrans : CblasNoTrans;
  auto lda = static_cast<blasint>(s.lda ? s.lda : (s.trans_a ? s.m : s.k));
  auto ldb = static_cast<blasint>(s.ldb ? s.ldb : (s.trans_b ? s.k : s.n));
  auto ldc = static_cast<blasint>(s.ldc ? s.ldc : s.n);
  auto m = static_cast<blasint>(s.m), n = static_cast<blasint>(s.n), k = static_cast<blasint>(s.k);
  if (dtype == DType::f32) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, static_cast<const float*>(a), lda,
                static_cast<const float*>(b), ldb, 0.0f, static_cast<float*>(c), ldc);
    return;
  }
  if (dtype == DType::f64) {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, static_cast<const double*>(a), lda,
                static_cast<const double*>(b), ldb, 0.0, static_cast<double*>(c), ldc);
    return;
  }
  if (dtype == DType::bf16 || dtype == DType::f16) {
    half_gemm(dtype, s, a, b, c, lda, ldb, ldc);
    return;
  }
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = 0;
      for (int64_t q = 0; q < s.k; ++q)
        acc += load(dtype, a, s.trans_a ? q * lda + i : i * lda + q) *
               load(dtype, b, s.trans_b ? j * ldb + q : q * ldb + j);
      store(dtype, c, i * ldc + j, acc);
    }
}

void set_gemm_threads(int threads) { openblas_set_num_threads(threads); }

} // namespace sinter::kernels
