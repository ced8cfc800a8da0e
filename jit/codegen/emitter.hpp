// jit/codegen/emitter.hpp — the one LLVM IR emitter for fused kernels (CPU today, NVPTX next)
// A kernel is emitted as `void NAME(ptr buffers, i64 begin, i64 end)`: buffers[0] is the
// output, buffers[1 + i] the kernel's i-th read; [begin, end) is a slice of its parallel range
// (rows for loops and row-reductions, output rows otherwise). A target maps that range to
// threads (CPU) or to blocks (GPU).
#pragma once
#include "jit/passes/fuse.hpp"

#include <cstdint>
#include <string>

namespace llvm {
class Module;
}

namespace sinter {

/// Size of the parallel range the kernel's entry point splits.
int64_t parallel_range(const Graph& graph, const Kernel& kernel);
/// Work per range step (elements touched), used to pick chunk sizes.
int64_t work_per_step(const Graph& graph, const Kernel& kernel);

/// Adds the kernel's function, named `name`, to `module`. Loop, reduce and scatter_add kernels.
void emit_kernel(llvm::Module& module, const FusionPlan& plan, const Kernel& kernel,
                 const std::string& name);

} // namespace sinter
