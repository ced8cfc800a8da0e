// jit/backend/cuda/nvptx_columns.hpp — column reductions on the GPU (bias gradients, partial sums
// over groups of rows): lanes over neighbouring columns, warps down the rows
#pragma once
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/codegen/kernel_emitter.hpp"

namespace sinter {

/// Emits the body of reduce kernel `e.kernel()` (every output a reduction keeping its operand's
/// last axis; siblings fold in the same pass) for a GpuStrategy::column_split `launch`. A block
/// takes 32 × `launch.vector_width` consecutive outputs, each lane `vector_width` neighbouring
/// ones, so a warp's loads of a row are contiguous (16 bytes a lane where the columns allow it);
/// the block's warps stride down the reduced rows, each thread loading gpu_column_split_unroll
/// rows before it folds any; the first warp then combines the warps' partials from shared
/// memory. Tiles stride over the grid when the outputs outnumber its blocks.
void emit_nvptx_column_split(KernelEmitter& e, const GpuLaunch& launch);

} // namespace sinter
