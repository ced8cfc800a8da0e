// tests/support/nvptx_emulator.hpp — runs a generated NVPTX kernel's LLVM IR on the CPU, one OS
// thread per GPU thread, so kernels written for tensor cores are checked on machines without a GPU
#pragma once
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/passes/fuse.hpp"
#include "jit/passes/runtime_rows.hpp"
#include "jit/runtime/host_tensor.hpp"

#include <span>

namespace sinter {

/// Emits `kernel` of `plan` with the NVPTX schedule, replaces the GPU's intrinsics with CPU
/// emulations (thread and block ids, bar.sync, shfl.sync, mma.sync m16n8k16 on bf16/f16 with
/// the PTX ISA's fragment layouts, ex2/lg2), JIT-compiles it for the host and runs the whole
/// grid: each block as 128 threads that meet at barriers, warps exchanging values like the
/// hardware. `arguments` are the kernel's buffers: its outputs (root first), then its reads.
/// libdevice's functions run as the host's. Any NVPTX intrinsic it does not emulate throws,
/// naming it.
void emulate_nvptx_kernel(const FusionPlan& plan, const Kernel& kernel,
                          std::span<void* const> arguments);

/// Runs a kernel whose row count is a parameter (emit_rows_kernel: compiled once, for
/// `launch`'s schedule) over `rows` rows, on the grid that row count gets. `buffers` are the
/// buffers of kernel.instance(rows): its outputs, then its reads.
void emulate_nvptx_rows_kernel(const RuntimeRowsKernel& kernel, const GpuLaunch& launch,
                               int64_t rows, std::span<void* const> buffers);

/// The order the emulator runs a grid's blocks in (a GPU promises none): a kernel whose result
/// depends on it (atomic adds into one slot from several blocks) gives other bits when it
/// changes. Applies to every later emulation in the process.
enum class EmulatedBlockOrder { ascending, descending };
void set_emulated_block_order(EmulatedBlockOrder order);

/// Runs an optimised step as the CUDA backend would on a GPU of compute capability
/// `capability`: for_nvptx, the GPU's fusion (gpu_fusion_options), buffers laid out by the
/// memory plan (intermediates sharing one arena), every generated kernel in the emulator and
/// every GEMM on the host (float64 accumulation, rounded to its type). Kernels take their row
/// count as a parameter wherever the CUDA backend's would (RuntimeRowsKernel). With
/// `keeps_operands`, the plan keeps the backward's GEMM operands, as on a device where they fit
/// (otherwise it recomputes them, as where no device says). Returns the outputs.
std::vector<HostTensor> emulate_nvptx_step(const Graph& optimized,
                                           std::span<const HostTensor> inputs, int capability = 80,
                                           bool keeps_operands = false);

} // namespace sinter
