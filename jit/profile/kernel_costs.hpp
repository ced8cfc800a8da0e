// jit/profile/kernel_costs.hpp — what each fused kernel is for the profiler: name, model path,
// role, bytes and FLOPs from the IR
#pragma once
#include "jit/passes/fuse.hpp"
#include "jit/profile/profiler.hpp"

#include <vector>

namespace sinter {

/// One KernelInfo per kernel of `plan`, in order. Bytes are the buffers a kernel reads and
/// writes (of a table it only gathers rows from, the rows gathered); FLOPs are 2·m·n·k for GEMMs,
/// the attention products for fused attention (2.5× the forward's for its gradients), and one per
/// element of every arithmetic node otherwise (reductions count their operand's elements). The role
/// comes from the root's model path
/// (`….bwd`, `optimizer.…`, `data_parallel.…`), and for forward kernels from what they read:
/// a distillation teacher's `teacher.*` weights and no trained parameter (an input X with an
/// output `new.X`) make it the teacher's.
std::vector<profile::KernelInfo> describe_kernels(const FusionPlan& plan);

} // namespace sinter
