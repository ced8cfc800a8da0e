// ops/kernel_kind.hpp — KernelKind: the kinds of kernel fusion makes, and their names
#pragma once

namespace sinter {

/// The kinds of kernel a fused graph is made of. A primitive's OpDef::kernel_kind says which
/// one its node makes when it roots a kernel; `row` is made only by fusion (a loop kernel that
/// takes in the reductions over its rows), never by an op of its own.
enum class KernelKind {
  loop,        ///< one pass over the root's elements; producers inlined elementally
  reduce,      ///< a reduction over axes (OpDef::reducer); the operand chain inlined
  gemm,        ///< matmul through the BLAS bridge, operands read from buffers
  scatter_add, ///< accumulating rows at indices (inlined index and update chains)
  row,         ///< per row of the last axis: reductions over the row (layernorm's mean and
               ///< variance, softmax's max and sum) one after another, then the elementwise
               ///< outputs of the row (and per-row values) from them, and column sums of
               ///< the row's values over each group of rows (RowLayout::partials)
  attention,   ///< fused attention (forward with its row log-sum-exp, or the three gradients):
               ///< a hand-written kernel reading its operands from buffers
  collective,  ///< all_reduce, reduce_scatter, all_gather or broadcast_from through the
               ///< backend's communicator: started where it stands, waited for before the
               ///< first kernel that reads its result (collective_waits)
};

/// The kind's name in kernel symbols, profiles and fusion dumps (SINTER_DUMP=fuse).
constexpr const char* kernel_kind_name(KernelKind kind) {
  switch (kind) {
  case KernelKind::loop: return "loop";
  case KernelKind::reduce: return "reduce";
  case KernelKind::gemm: return "gemm";
  case KernelKind::scatter_add: return "scatter";
  case KernelKind::row: return "row";
  case KernelKind::attention: return "attention";
  case KernelKind::collective: return "collective";
  }
  return "kernel";
}

} // namespace sinter
