// jit/passes/fuse_internal.hpp — what the fusion pass's files share: the op facts fusion reads
// and the steps fuse() runs after the partition (fuse_rematerialize, fuse_merge, fuse_order)
#pragma once
#include "jit/passes/fuse.hpp"

#include "ops/registry.hpp"

#include <vector>

namespace sinter::fuse_steps {

/// Ops that only move or pick elements: recomputing them in each consumer costs no arithmetic.
inline bool index_only(OpId op) { return op_def(op).fusion == FusionCost::index_only; }

/// One cheap instruction per element: worth recomputing rather than storing and reloading.
inline bool cheap_elementwise(OpId op) { return op_def(op).fusion == FusionCost::cheap; }

/// The kernel a node of `op` makes when it is a kernel's root.
inline KernelKind kind_of(OpId op) { return op_def(op).kernel_kind; }

/// Reductions, GEMMs, scatters, attention and collectives: never inlined into another kernel.
inline bool always_root(OpId op) { return kind_of(op) != KernelKind::loop; }

/// `v` is no longer stored: no buffer of its own, and the reshapes that viewed it compute it.
inline void stop_storing(FusionPlan& plan, ValueId v) {
  plan.materialized[v] = false;
  for (ValueId id = 0; id < plan.view_of.size(); ++id)
    if (plan.view_of[id] == v) plan.view_of[id] = id;
}

// ---- fuse_rematerialize.cpp: fewer values stored -------------------------------------------

/// With FusionOptions::rematerialize: stops storing values (clears `stored`) that their readers
/// can recompute from buffers alive anyway, or from fewer bytes kept longer. `pinned` values
/// (read from their buffers by a GEMM, attention or collective) stay stored.
void rematerialize(const Graph& graph, std::vector<bool>& stored,
                   const std::vector<bool>& is_output, const std::vector<bool>& pinned);

// ---- fuse_merge.cpp: fewer, larger kernels -------------------------------------------------

/// Buffers a loop kernel reads only at the index it writes (through elementwise ops alone).
std::vector<ValueId> aligned_reads(const FusionPlan& plan, const Kernel& kernel);
std::vector<ValueId> row_overwritable_reads(const FusionPlan& plan, const Kernel& kernel);
/// The fused attention kernels over the same operands become one kernel.
void merge_attention_kernels(FusionPlan& plan);
/// Loop kernels take in the last-axis reductions they read and become KernelKind::row.
void merge_into_row_kernels(FusionPlan& plan);
/// Loop kernels over one shape (with `reductions`, also reductions over the same axes of
/// same-shaped operands) become one pass with several outputs.
void merge_sibling_kernels(FusionPlan& plan, bool reductions, int64_t scalar_sibling_max_elements);
/// Column sums over groups of a row kernel's rows (FusionOptions::row_partial_max_values) join it.
void merge_column_partials(FusionPlan& plan, const FusionOptions& options);
/// Reductions over a row kernel's rows that share a read with it become more of its outputs.
void merge_row_reductions(FusionPlan& plan);
/// Elementwise loops over a row kernel's full-row outputs (a cast) become more of its outputs.
void join_row_kernels(FusionPlan& plan);

// ---- fuse_order.cpp: when kernels run and where they write ---------------------------------

/// Extra outputs nothing else reads (left behind by merges) stop being stored.
void drop_unread_outputs(FusionPlan& plan);
/// Collectives, and loop kernels that only feed them, move up to right after what they read.
void hoist_collectives(FusionPlan& plan);
/// Each loop kernel or collective writes over a buffer that dies in it, where that is safe.
void choose_in_place(FusionPlan& plan);
/// FusionOptions::store_over_donated_inputs: outputs stored over the inputs they replace.
void store_over_donated_inputs(FusionPlan& plan);

} // namespace sinter::fuse_steps
