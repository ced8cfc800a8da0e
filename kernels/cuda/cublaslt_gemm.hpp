// kernels/cuda/cublaslt_gemm.hpp — GEMMs on the GPU through cuBLASLt, loaded with dlopen
#pragma once
#include "jit/backend/cuda/cuda_driver.hpp"
#include "jit/ir/dtype.hpp"
#include "kernels/cpu/blas_gemm.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

namespace sinter::kernels {

/// How f32 GEMMs use the tensor cores: `exact` keeps fp32 products; `tf32` rounds inputs to
/// TF32 (10-bit mantissa) with fp32 accumulation, as PyTorch's allow_tf32. bf16 and f16 always
/// accumulate in fp32; f64 stays f64.
enum class Fp32Math { exact, tf32 };

/// `SINTER_TF32=1` selects tf32; unset or 0 is exact. Other values → std::invalid_argument.
Fp32Math fp32_math_from_environment();

/// What cuBLASLt does besides the product: add a bias row [n] (then ReLU or GELU), or also write
/// the bias gradient, the column sums of B ([n], B = the row-major [k, n] operand, not transposed).
/// cuBLASLt epilogues: bias (BIAS, RELU_BIAS, GELU_BIAS), GELU_AUX_BIAS (GELU's input written to
/// `aux` beside D), the bias gradient (BGRADA), and GELU's gradient (DGELU: D = A·B · gelu′(aux)).
enum class GemmEpilogueOp {
  none,
  bias,
  relu_bias,
  gelu_bias,
  gelu_aux_bias,
  bias_gradient,
  gelu_gradient
};

/// One row-major GEMM shape, batched: C[i] = op(A[i]) · op(B[i]) for i < batch, contiguous,
/// with an optional epilogue whose vector is `bias`.
struct GpuGemmShape {
  DType dtype = DType::f32;
  GemmShape shape;
  int64_t batch = 1;
  Fp32Math fp32 = Fp32Math::exact;
  GemmEpilogueOp epilogue = GemmEpilogueOp::none;
  cuda::DevicePtr bias = 0; ///< the bias vector (device), part of the cached descriptor
  /// The bias vector's type: `dtype` unless set (mixed precision: an f32 bias gradient of a
  /// bf16 or f16 GEMM, cuBLASLt's BIAS_DATA_TYPE).
  std::optional<DType> bias_dtype;
  /// GELU_AUX_BIAS's and DGELU's matrix of GELU inputs (device; D's type and layout, so its
  /// leading dimension is `shape.n`), part of the cached descriptor.
  cuda::DevicePtr aux = 0;
  auto key() const {
    return std::make_tuple(static_cast<int>(dtype), shape.m, shape.n, shape.k, shape.trans_a,
                           shape.trans_b, batch, static_cast<int>(fp32), static_cast<int>(epilogue),
                           bias, static_cast<int>(bias_dtype.value_or(dtype)), aux);
  }
};

/// libcublasLt (.so.13, .so.12 or .so), one handle per process. Each shape's descriptors and
/// heuristic choice are made once and cached; a GEMM is then one cublasLtMatmul call, which
/// is also valid inside CUDA graph capture.
class CublasLt {
public:
  /// The library, or nullptr with the reason in unavailable_reason().
  static CublasLt* get();
  static const std::string& unavailable_reason();
  ~CublasLt();

  /// Workspace the cached algorithms may use (the caller allocates it once per device).
  static constexpr std::size_t workspace_bytes = 32u << 20;

  /// Enqueues C = op(A)·op(B) on `stream`. Throws std::invalid_argument for dtypes cuBLASLt
  /// does not multiply here (integers), std::runtime_error naming cuBLASLt's status otherwise.
  void matmul(const GpuGemmShape& gemm, cuda::DevicePtr a, cuda::DevicePtr b, cuda::DevicePtr c,
              cuda::DevicePtr workspace, cuda::StreamHandle stream);
  /// Creates the shape's descriptors and picks its algorithm now (at compile time), so that a
  /// step captured into a CUDA graph makes no host-side cuBLASLt setup calls.
  void prepare(const GpuGemmShape& gemm) { plan(gemm); }

  struct Api;
  struct Plan;

private:
  CublasLt() = default;
  static std::pair<CublasLt*, std::string>& loaded();
  const Plan& plan(const GpuGemmShape& gemm);

  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;
  std::mutex mutex_;
  std::map<decltype(GpuGemmShape{}.key()), std::unique_ptr<Plan>> plans_;
};

} // namespace sinter::kernels
