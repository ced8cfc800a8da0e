// jit/backend/cuda/attention_choice.hpp — which attention kernels a CUDA step runs: cuDNN's fused
// SDPA or sinter's NVPTX kernels, timed and compared once per shape and remembered
#pragma once
#include "jit/backend/cuda/cuda_device.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/passes/fuse.hpp"
#include "jit/runtime/kernel_cache.hpp"
#include "kernels/cuda/cudnn_attention.hpp"

#include <array>
#include <optional>
#include <string>
#include <variant>

namespace sinter {

/// An attention kernel run by cuDNN: its shape and the graph nodes of its buffers.
struct CudnnAttentionStep {
  kernels::CudnnAttentionShape shape;
  enum Role { q, k, v, o, lse, d_o, dq, dk, dv, roles };
  std::array<std::optional<ValueId>, roles> nodes; ///< unset: the call does not bind it
  /// Elements from the start of the node's buffer to the role's first (a view of a packed qkv).
  std::array<int64_t, roles> offsets{};
  std::size_t workspace = 0; ///< device bytes (after prepare)
};

/// The cuDNN form of attention kernel `kernel` of `graph`, or why cuDNN cannot run it (a
/// boolean mask, a backward that does not write all three gradients, dtype, dims, GPU).
std::variant<CudnnAttentionStep, std::string>
cudnn_attention_step(const FusionPlan& plan, const Kernel& kernel, int capability);

/// The device bytes a step's cuDNN attention calls may need besides the memory plan (the
/// largest backward's f32 dq accumulator and do·o rows), before the choice is made: 0 where
/// cuDNN cannot run (absent, SINTER_ATTENTION=nvptx or decomposed, no kernel it takes).
std::size_t cudnn_attention_workspace_bound(const FusionPlan& fusion, int capability);

/// What the attention kernel `kernel` runs on. SINTER_ATTENTION=nvptx: the NVPTX kernels;
/// `cudnn`: cuDNN where it plans the shape; `fused` (default): both are run once on random
/// operands at the shape's first compile, timed (best of 5), their outputs compared, and the
/// faster that agrees kept in `cache` for later compiles. Each decision is one log line, e.g.
/// `sinter: attention 8×12×1024×1024×64 bf16 causal on cuda: cudnn (0.061 ms; nvptx 0.352 ms)`.
/// Any cuDNN failure (library absent, no engine, disagreeing outputs) keeps the NVPTX kernel
/// `nvptx_function` (launched as `nvptx_launch` with `argument_nodes`), saying why.
std::optional<CudnnAttentionStep> choose_attention(const FusionPlan& plan, const Kernel& kernel,
                                                   cuda::FunctionHandle nvptx_function,
                                                   const GpuLaunch& nvptx_launch,
                                                   std::span<const ValueId> argument_nodes,
                                                   CudaDevice& device, KernelCache& cache);

} // namespace sinter
