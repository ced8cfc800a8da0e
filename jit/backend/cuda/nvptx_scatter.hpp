// jit/backend/cuda/nvptx_scatter.hpp — scatter_add kernels on the GPU: atomic adds, or a block
// owning its output rows and adding their updates in position order (reproducible)
#pragma once
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/codegen/kernel_emitter.hpp"

namespace sinter {

/// Emits the body of scatter_add kernel `e.kernel()` for `launch` (gpu_launch's strategy):
/// - atomic_scatter: a thread per update element, each an atomic add into its output slot (the
///   runtime clears the output first); the order of the adds varies from run to run.
/// - owned_scatter: block b owns output rows [b·R, b·R + R) (R = launch.owned_rows) and clears
///   them; it reads every index in turn, a tile of one per thread, lists the positions that hit
///   its rows in position order (warp ballots), and adds those updates, each thread to its own
///   columns. Every output element is the sum of its updates in position order, the sum the
///   interpreter and the CPU compute, whatever order the blocks run in.
/// - serial_scatter: one thread does the whole scatter in order.
void emit_nvptx_scatter(KernelEmitter& e, const GpuLaunch& launch);

} // namespace sinter
