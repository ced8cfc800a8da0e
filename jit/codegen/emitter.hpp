// jit/codegen/emitter.hpp — the one LLVM IR emitter for fused kernels, CPU and NVPTX
// CPU: a kernel is `void NAME(ptr buffers, i64 begin, i64 end)`: buffers[0] is the output,
// buffers[1 + i] the kernel's i-th read; [begin, end) is a slice of its parallel range (rows for
// loops and row-reductions, output rows otherwise) that the thread pool hands out.
// NVPTX: a kernel is `void NAME(ptr addrspace(1) out, ptr addrspace(1) read0, ...)`, launched
// on the 1-D grid gpu_launch() describes; it walks its work grid-stride, so any grid is correct.
// The elemental code (what each op computes at an index) is shared by both.
#pragma once
#include "jit/passes/fuse.hpp"

#include <cstdint>
#include <string>

namespace llvm {
class Module;
}

namespace sinter {

/// Identifies this build of the code generator (size and mtime of the binary holding it), so
/// kernels cached by an older emitter are never reused. Part of every target fingerprint.
std::string emitter_build_id();

/// Size of the parallel range the kernel's entry point splits.
int64_t parallel_range(const Graph& graph, const Kernel& kernel);
/// Work per range step (elements touched), used to pick chunk sizes.
int64_t work_per_step(const Graph& graph, const Kernel& kernel);

enum class CodegenTarget { cpu, nvptx };

/// How a GPU kernel maps its work to threads.
enum class GpuStrategy {
  elementwise,       ///< loop kernels: one thread per `vector_width` consecutive elements
  thread_per_output, ///< short reductions (< 32 contiguous or < 64 strided elements)
  column_split,      ///< reductions keeping the last axis (bias gradients): 32 neighbouring
                     ///< outputs per block, 32 row groups each, combined in shared memory
  warp_per_output,   ///< reductions over 32..1023 contiguous elements: warp shuffles
  block_per_output,  ///< long reductions: warp shuffles, then shared memory across warps
  atomic_scatter,    ///< scatter_add: one thread per update element, atomic adds
  serial_scatter,    ///< scatter_add on 16-bit or boolean storage (no atomics): one thread
};

/// A GPU kernel's launch: `blocks` × `threads` on a 1-D grid. Every buffer passed to a GPU
/// kernel must be 16-byte aligned (the emitter assumes it for vector loads and stores).
struct GpuLaunch {
  GpuStrategy strategy = GpuStrategy::elementwise;
  int64_t items = 0;              ///< work items: element groups, outputs or updates
  int64_t threads = 256;          ///< per block
  int64_t blocks = 1;             ///< grid size (capped; kernels loop grid-stride)
  int64_t vector_width = 1;       ///< elementwise: consecutive elements per thread
  bool zero_output_first = false; ///< the runtime clears the output before the launch
};
GpuLaunch gpu_launch(const Graph& graph, const Kernel& kernel);

/// Adds the kernel's function, named `name`, to `module`. Loop, reduce and scatter_add kernels.
/// For NVPTX, math functions are calls to libdevice (`__nv_expf`, ...) that the target links.
void emit_kernel(llvm::Module& module, const FusionPlan& plan, const Kernel& kernel,
                 const std::string& name, CodegenTarget target = CodegenTarget::cpu);

} // namespace sinter
