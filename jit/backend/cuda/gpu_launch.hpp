// jit/backend/cuda/gpu_launch.hpp — how a fused kernel's work maps to a CUDA grid (the NVPTX
// schedule's launch decisions, shared by the code generator and the runtime)
#pragma once
#include "jit/passes/fuse.hpp"

#include <cstdint>
#include <utility>
#include <vector>

namespace sinter {

/// How a GPU kernel maps its work to threads.
enum class GpuStrategy {
  elementwise,       ///< loop kernels: one thread per `vector_width` consecutive elements
  thread_per_output, ///< short reductions (< 32 contiguous or < 64 strided elements)
  column_split,      ///< reductions keeping the last axis (bias gradients): 32 lanes a
                     ///< block, each `vector_width` neighbouring outputs, its warps walking
                     ///< the rows, combined in shared memory (nvptx_columns)
  warp_per_output,   ///< reductions over 32..1023 contiguous elements, and row kernels over
                     ///< rows up to gpu_warp_row_limit: a warp each, warp shuffles
  block_per_output,  ///< long reductions and rows: a block each, warp shuffles, then shared
                     ///< memory across warps
  atomic_scatter,    ///< scatter_add: one thread per update element, atomic adds
  owned_scatter,     ///< scatter_add without atomics: a block owns `owned_rows` output rows
                     ///< and adds the updates to them in position order (16-bit storage, and
                     ///< every scatter under SINTER_DETERMINISTIC=1)
  serial_scatter,    ///< scatter_add on boolean storage: one thread
  attention,         ///< fused attention: 4 warps per block of 64 query rows or 64 keys
};

/// A GPU kernel's launch: `blocks` × `threads` on a 1-D grid. Every buffer passed to a GPU
/// kernel must be 16-byte aligned (the schedule assumes it for vector loads and stores).
struct GpuLaunch {
  GpuStrategy strategy = GpuStrategy::elementwise;
  int64_t items = 0;              ///< work items: element groups, outputs, rows or updates
  int64_t threads = 256;          ///< per block
  int64_t blocks = 1;             ///< grid size (capped; kernels loop grid-stride)
  int64_t vector_width = 1;       ///< elementwise and rows: consecutive elements per thread
  bool zero_output_first = false; ///< the runtime clears the output before the launch
  int64_t shared_bytes = 0;       ///< dynamic shared memory per block (a row cache)
  int64_t owned_rows = 0;         ///< owned_scatter: output rows per block
};
GpuLaunch gpu_launch(const Graph& graph, const Kernel& kernel);

/// Whether GPU steps must give the same bits from run to run (SINTER_DETERMINISTIC=1): no
/// atomic adds in generated kernels, and attention backwards on sinter's own kernels.
bool gpu_deterministic();

/// An owned scatter's grid: about this many blocks, each owning ⌈rows / blocks⌉ output rows.
/// Each block reads every index once, so fewer, fuller blocks read less; 1024 blocks of 256
/// threads are one wave on an H100 (8 a multiprocessor).
inline constexpr int64_t gpu_owned_scatter_blocks = 1024;

/// A row kernel with a block per row that passes over its row more than once (reductions that
/// read earlier ones' values, then the row's elements) keeps the buffers it reads whole rows of
/// in dynamic shared memory: the first pass loads each element from memory and keeps it, the
/// later passes read it back, so the row is read from memory once (GPT-2's loss: 100 KB of
/// bf16 logits a row, read once instead of three times). At most gpu_row_cache_max_bytes a
/// block, what every sm_80+ GPU lets a block have (sm_86 and sm_89: 99 KB; an H100 fits two
/// such blocks an SM).
struct RowCache {
  std::vector<std::pair<ValueId, int64_t>> buffers; ///< read buffer, its byte offset in the cache
  int64_t bytes = 0;                                ///< 0: no cache
};
inline constexpr int64_t gpu_row_cache_max_bytes = 99 * 1024;
RowCache gpu_row_cache(const Graph& graph, const Kernel& kernel);

/// Column reductions (GpuStrategy::column_split): the rows each thread loads before adding them,
/// so that many loads are in flight (the cost model reads it too).
inline constexpr int64_t gpu_column_split_unroll = 4;

/// Column reductions whose column count allows it take 16 bytes of neighbouring columns a lane
/// (8 bf16 or 4 f32: a warp reads 512 or 128 contiguous bytes of each row, with one load
/// instruction a lane where a column a lane took eight), in blocks of 256 threads, when that
/// leaves at least gpu_column_vector_min_blocks blocks and gpu_column_vector_min_rows rows to
/// walk; otherwise a column a lane in blocks of 1024 (a short second pass over a few hundred
/// columns: more warps). Each thread's partials wait in shared memory, 8 bytes each, for its
/// block's first warp to combine them: at most gpu_column_shared_bytes.
inline constexpr int64_t gpu_column_vector_threads = 256;
inline constexpr int64_t gpu_column_vector_min_blocks = 128;
inline constexpr int64_t gpu_column_vector_min_rows = 8;
inline constexpr int64_t gpu_column_shared_bytes = 48 * 1024;
/// The shared memory a column reduction's block keeps its threads' partials in: an 8-byte slot
/// (any compute type) per thread, column of its lane and reduction.
inline constexpr int64_t gpu_column_partials_bytes(int64_t threads, int64_t width,
                                                   int64_t reductions) {
  return threads * width * reductions * 8;
}
/// Column reductions split before fusion (split_column_reductions) aim at this many blocks of
/// gpu_column_vector_threads: about eight an SM of an H100, a full wave.
inline constexpr int64_t gpu_column_target_blocks = 1024;

/// More blocks than this and a kernel walks its work grid-stride.
inline constexpr int64_t gpu_max_blocks = 65535;

/// Row kernels over rows up to this long take a warp per row; longer rows a block.
inline constexpr int64_t gpu_warp_row_limit = 2048;

/// A row kernel with column sums per group of rows (RowLayout::partials) takes a group a block
/// (about four blocks an SM of an H100), its 8 warps a row at a time, each adding its rows'
/// values into its own shared-memory row of each partial, [partials][8][length] f32: at most
/// gpu_row_partial_max_values values (48 KB, the static limit), so a layernorm's γ and β up to
/// 768 columns. At least gpu_row_partial_min_groups groups (a block an SM), or, where the rows
/// are fewer than that many groups of gpu_row_partial_group_rows, groups of that many rows.
inline constexpr int64_t gpu_row_groups = 512;
inline constexpr int64_t gpu_row_partial_min_groups = 128;
inline constexpr int64_t gpu_row_partial_group_rows = 8;
inline constexpr int64_t gpu_row_partial_max_values = 1536;

/// A loop of one block writing more buffers than this (the merged AdamW updates of small
/// vectors) takes one element a thread rather than 16 bytes: its few warps' arithmetic, not
/// memory, bounds it (33–41 µs on an H100 for 17 [768] updates in 6 warps).
inline constexpr std::size_t gpu_narrow_loop_outputs = 8;

/// How the GPU backend fuses: layernorm, softmax and loss rows in one kernel each (row
/// kernels), sibling reductions (a layernorm backward's two sums) in one pass, and column sums
/// over a row kernel's rows (its γ and β gradients) in the row kernel, per block of rows,
/// attention's q, k, v and dO read where the heads lie, with no copy to lay them out, and each
/// large parameter's optimizer update a kernel of its own (262144 elements fill an H100),
/// writing the new parameter and state over the old (the inputs they replace stay on the GPU),
/// and the bias of a GEMM whose rows take a block each (a language model's head) kept for the
/// GEMM's epilogue.
inline constexpr FusionOptions gpu_fusion_options{
    .row_kernels = true,
    .sibling_reductions = true,
    .rematerialize = true,
    .row_partial_max_values = gpu_row_partial_max_values,
    .row_partial_min_groups = gpu_row_partial_min_groups,
    .row_partial_max_groups = gpu_max_blocks,
    .row_partial_group_rows = gpu_row_partial_group_rows,
    .attention_operand_views = true,
    .scalar_sibling_max_elements = 1 << 18,
    .store_over_donated_inputs = true,
    .gemm_bias_rows_above = gpu_warp_row_limit,
    .gemm_gelu_pre_activation = true};

} // namespace sinter
