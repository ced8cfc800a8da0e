// jit/backend/cuda/nvptx_attention.hpp — fused attention on NVIDIA tensor cores: which attention
// nodes the NVPTX kernels take, how they launch, and their code
#pragma once
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/codegen/kernel_emitter.hpp"

#include <span>
#include <string>

namespace sinter {

/// Why the fused NVPTX attention kernels cannot run a fused attention node whose operands have
/// types `operands` on an sm_<capability> GPU; empty when they can. They take bf16 or
/// f16 operands (mma.sync m16n8k16, f32 accumulators) on sm_80 or newer, with q/k and v feature
/// dims up to 128; any sequence lengths, scale, causality and boolean mask.
std::string nvptx_attention_unsupported(std::span<const TensorType> operands, int capability);

/// The launch of an attention kernel: 128 threads (4 warps of 16 rows) per block of 64 query
/// rows (forward, dQ) or 64 keys (dK and dV); the backward kernel's grid holds both kinds.
GpuLaunch nvptx_attention_launch(const Graph& graph, const Kernel& kernel);

/// Emits an attention kernel's body into the emitter's current function, whose arguments are
/// the kernel's outputs then its reads. The forward never stores the [Tq, Tk] scores (online
/// softmax over key tiles in registers; it saves the row log-sum-exp); the backward recomputes
/// them tile by tile from q, k and the log-sum-exp.
void emit_nvptx_attention(KernelEmitter& emitter, const GpuLaunch& launch);

/// Whether the kernels double-buffer their tiles (SINTER_ATTENTION_PIPELINE, default on). Part
/// of the NVPTX target's fingerprint, so cached kernels of the other kind are not reused.
bool attention_pipeline_enabled();

} // namespace sinter
