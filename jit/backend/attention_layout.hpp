// jit/backend/attention_layout.hpp — how a fused attention node's operands lie in memory, for
// the backends' kernels: slice sizes, scale, causality, the operands' strides and the mask's
#pragma once
#include "jit/ir/graph.hpp"
#include "jit/passes/fuse.hpp"

#include <cstdint>
#include <vector>

namespace sinter {

/// Where one operand's slices lie in the buffer the kernel reads, or a result's in the buffer it
/// writes: slice `batch` (its index over batch_dims) starts at offset + Σ b_n · batch_stride[n],
/// its rows `row_stride` elements apart, each row contiguous. Contiguous: offset 0, strides of
/// the row-major layout.
struct AttentionOperand {
  ValueId buffer = 0;
  int64_t offset = 0;
  std::vector<int64_t> batch_stride;
  int64_t row_stride = 0;
  bool contiguous = true; ///< the slices lie one after another, row-major, from offset 0
};

/// A fused attention node (forward, log-sum-exp or gradient) as its kernel sees it: `batches`
/// independent slices of q [tq, d], k [tk, d], v [tk, dv], row-major, each operand contiguous
/// or a strided view of a buffer (FusionOptions::attention_operand_views).
struct AttentionLayout {
  bool backward = false; ///< fused_attention_grad (operands q, k, v, o, lse, do[, mask])
  int64_t batches = 0, tq = 0, tk = 0, d = 0, dv = 0;
  double scale = 1.0;  ///< the attribute, or 1/sqrt(d) when it is 0
  bool causal = false; ///< query i attends to keys j <= i
  bool has_mask = false;
  std::size_t mask_operand = 0; ///< the mask's operand position (3 forward, 6 backward)
  Shape batch_dims;             ///< the scores' leading dims: q's shape without its last two
  /// The mask broadcasts to the scores [batch_dims..., tq, tk]: element (b..., i, j) is at
  /// sum(b_n * mask_batch_stride[n]) + i * mask_row_stride + j * mask_col_stride (a stride
  /// is 0 along a dim the mask broadcasts over).
  std::vector<int64_t> mask_batch_stride;
  int64_t mask_row_stride = 0, mask_col_stride = 0;

  /// One per operand of the root (q, k, v, then the backward's o, lse, dO, then the mask).
  std::vector<AttentionOperand> operands;
  /// Where the kernel writes o (the forward) or dq, dk and dv (the backward): contiguous, or
  /// token-major, or the parts of one packed gradient (ops/attention_attrs.hpp). `buffer` is the
  /// output value; attention_layout(plan, kernel) fills those its kernel writes.
  AttentionOperand o_result, dq_result, dk_result, dv_result;

  /// Offset of slice `batch`'s [tq, tk] block in the mask.
  int64_t mask_offset(int64_t batch) const;
};

/// The layout of fused attention node `root` of `graph`, its operands contiguous.
AttentionLayout attention_layout(const Graph& graph, const Node& root);
/// The layout of attention kernel `kernel` of `plan`: operands its body reads through views
/// (attention_operand_view) get their buffer's strides, results their place in their outputs.
AttentionLayout attention_layout(const FusionPlan& plan, const Kernel& kernel);

} // namespace sinter
