// jit/backend/cuda/gemm_epilogue.hpp — which GEMMs can absorb the next kernel as a cuBLASLt
// epilogue
#pragma once
#include "jit/passes/fuse.hpp"
#include "jit/runtime/memory_plan.hpp"

#include <cstddef>
#include <vector>

namespace sinter {

enum class EpilogueKind {
  bias,      ///< `absorbed` adds a bias row to the GEMM's result: the GEMM writes its root
  relu_bias, ///< ... then applies ReLU
  gelu_bias, ///< ... then applies GELU (tanh form)
  /// ... then applies GELU, and also writes the sum (GELU's input, `aux`): GELU_AUX_BIAS
  gelu_aux_bias,
  bias_gradient, ///< `absorbed` sums the GEMM's B operand over rows: the GEMM writes that too
  /// `absorbed` multiplies the GEMM's result by GELU's derivative at `aux` (a stored
  /// pre-activation of the result's shape): DGELU, the GEMM writes the product
  gelu_gradient,
};

/// A kernel (`absorbed`) that runs inside GEMM `gemm` as a cuBLASLt epilogue.
struct GemmEpilogue {
  std::size_t gemm = 0, absorbed = 0; ///< kernel indices
  EpilogueKind kind = EpilogueKind::bias;
  ValueId bias = 0; ///< bias kinds: the bias vector read [n]
  ValueId aux = 0;  ///< gelu_aux_bias: the sum written; gelu_gradient: the pre-activation read
};

/// Bias: every GEMM followed directly by a loop kernel computing `C + broadcast(bias)`, then
/// optionally ReLU or GELU (recognised by comparison with the pipeline's own lowering), with
/// reshapes and floating-point casts allowed between (mixed precision: C widened to f32, a bf16
/// or f32 bias, the activation narrowed back to C's type), where that
/// kernel is C's only reader, C is not an output, the GEMM is not batched, and the kernel's result
/// does not share memory with the GEMM's operands (the memory plan may reuse an operand's slot once
/// it is dead). With GELU, the kernel may also store the sum itself (a pre-activation the
/// backward reads, FusionOptions::gemm_gelu_pre_activation): GELU_AUX_BIAS writes both. GELU's
/// gradient: a loop kernel computing dG · gelu′(P) from a 2-D GEMM's result dG and a stored
/// pre-activation P of its shape (recognised by comparison with the pipeline's own gradient of
/// GELU), dG's only reader and written in place over it, so the GEMM may write it as DGELU
/// however many kernels run between the two. Bias gradient: a reduce kernel whose one output is
/// `reduce_sum(dY)` over every dim of dY but its last (or, under mixed precision, of dY cast from
/// bf16/f16 to f32: the GEMM then writes an f32 bias gradient), and a later 2-D GEMM reading dY
/// untransposed as B, seen as [rows, n] (dW = Xᵀ·dY; dY may be a value the reduction recomputes, as
/// long as B is the same node up to reshapes), with every reader of the sum after that GEMM (its
/// slot is reserved from the reduce on, so writing it later is safe). Each GEMM gets at most one
/// epilogue.
std::vector<GemmEpilogue> find_gemm_epilogues(const FusionPlan& plan, const MemoryPlan& memory);

} // namespace sinter
