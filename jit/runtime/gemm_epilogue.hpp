// jit/runtime/gemm_epilogue.hpp — which GEMMs can absorb the next kernel as a cuBLASLt epilogue
#pragma once
#include "jit/passes/fuse.hpp"
#include "jit/runtime/memory_plan.hpp"

#include <cstddef>
#include <vector>

namespace sinter {

enum class EpilogueKind { bias, relu_bias };

/// The loop kernel `absorbed`, which only adds a bias row to GEMM `gemm`'s result (and applies
/// ReLU), runs inside the GEMM: the GEMM writes `absorbed`'s root and reads `bias` [n].
struct GemmEpilogue {
  std::size_t gemm = 0, absorbed = 0; ///< kernel indices
  EpilogueKind kind = EpilogueKind::bias;
  ValueId bias = 0;
};

/// Every GEMM followed directly by a loop kernel computing `C + broadcast(bias)` or
/// `max(C + broadcast(bias), 0)`, where that kernel is C's only reader, C is not an output,
/// the GEMM is not batched, and the kernel's result does not share memory with the GEMM's
/// operands (the memory plan may reuse an operand's slot once it is dead).
std::vector<GemmEpilogue> find_gemm_epilogues(const FusionPlan& plan, const MemoryPlan& memory);

} // namespace sinter
