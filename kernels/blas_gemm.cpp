// kernels/blas_gemm.cpp — OpenBLAS sgemm/dgemm calls, and a loop for the other dtypes
#include "kernels/blas_gemm.hpp"

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
