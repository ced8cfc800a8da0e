// jit/backend/cuda/nvptx_attention_tiling.hpp — how the NVPTX attention kernels split their work:
// block and tile sizes, the outputs a kernel writes, and its blocks (the launch and the kernel
// body both read them)
#pragma once
#include "jit/backend/attention_layout.hpp"
#include "jit/passes/fuse.hpp"

#include <algorithm>
#include <cstdint>

namespace sinter::attention_tiling {

// Each warp owns 16 rows (one mma tile of rows); a block of 4 warps owns 64 query rows (forward
// and dQ) or 64 keys (dK and dV).
constexpr int64_t warps_per_block = 4;
constexpr int64_t threads_per_block = 32 * warps_per_block;
constexpr int64_t warp_rows = 16;
constexpr int64_t block_rows = warps_per_block * warp_rows;
constexpr int64_t key_tile = 64;      ///< keys per shared-memory tile (forward and dQ)
constexpr int64_t max_head_dim = 128; ///< beyond it the accumulators no longer fit in registers
constexpr int64_t row_padding = 8;    ///< elements after each shared row: lanes hit other banks
constexpr int min_capability = 80;    ///< mma.sync m16n8k16 with bf16 operands
constexpr int64_t max_grid = 65535;   ///< more work than that is walked grid-stride

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
inline int64_t ceil_div(int64_t n, int64_t m) { return (n + m - 1) / m; }

/// Argument positions of the outputs the kernel writes (-1: not written).
struct OutputPositions {
  int o = -1, lse = -1, dq = -1, dk = -1, dv = -1;
  bool key_side() const { return dk >= 0 || dv >= 0; }
};
OutputPositions output_positions(const Graph& g, const Kernel& kernel);

/// A kernel's work items per launch: dK/dV blocks (backward, when dK or dV is an output), then
/// blocks of query rows (the forward, or dQ when it is an output).
struct WorkItems {
  int64_t key_side = 0, query_side = 0;
};
WorkItems work_items(const AttentionLayout& l, const OutputPositions& out);

/// Queries per tile of the dK/dV pass: 64, or 32 when feature dims above 64 leave fewer
/// registers for the scores.
inline int64_t backward_query_tile(const AttentionLayout& l) {
  return std::max(l.d, l.dv) > 64 ? 16 : 32;
}

} // namespace sinter::attention_tiling
