// jit/backend/cuda/nvptx_emulator.hpp — runs a generated NVPTX kernel's LLVM IR on the CPU, one OS
// thread per GPU thread, so kernels written for tensor cores are checked on machines without a GPU
#pragma once
#include "jit/passes/fuse.hpp"

#include <span>

namespace sinter {

/// Emits `kernel` of `plan` with the NVPTX schedule, replaces the GPU's intrinsics with CPU
/// emulations (thread and block ids, bar.sync, shfl.sync, mma.sync m16n8k16 on bf16/f16 with
/// the PTX ISA's fragment layouts, ex2/lg2), JIT-compiles it for the host and runs the whole
/// grid: each block as 128 threads that meet at barriers, warps exchanging values like the
/// hardware. `arguments` are the kernel's buffers: its outputs (root first), then its reads.
/// Covers what the attention kernels use; any other NVPTX intrinsic throws naming it.
void emulate_nvptx_kernel(const FusionPlan& plan, const Kernel& kernel,
                          std::span<void* const> arguments);

} // namespace sinter
