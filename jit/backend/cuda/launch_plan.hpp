// jit/backend/cuda/launch_plan.hpp — what a CUDA step launches, decided once at compile time:
// generated kernels with their grids, cuBLASLt GEMMs with their epilogues, by graph node
#pragma once
#include "jit/backend/cuda/attention_choice.hpp"
#include "jit/backend/cuda/cuda_device.hpp"
#include "jit/backend/cuda/gemm_epilogue.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/device.hpp"
#include "jit/pipeline/prepare.hpp"
#include "jit/runtime/compile_report.hpp"
#include "jit/runtime/memory_plan.hpp"
#include "kernels/cuda/cublaslt_gemm.hpp"

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sinter {

/// One operation of the step, by graph node; the executable binds the nodes to device pointers
/// per input set.
struct GpuLaunchStep {
  KernelKind kind = KernelKind::loop;
  /// The fusion plan's kernel it runs (a GEMM that absorbed an epilogue: the GEMM).
  std::size_t kernel = 0;
  cuda::FunctionHandle function = nullptr;
  GpuLaunch shape;
  std::vector<ValueId> argument_nodes; ///< outputs (root first), then reads
  std::size_t clear_bytes = 0;         ///< cleared before the launch (atomic scatter)
  /// The runtime size, passed after the buffers, of a kernel compiled with one as a parameter
  /// (RuntimeRowsKernel: its row count, or the dim that changed between shape buckets); unset
  /// for a kernel compiled for its shape.
  std::optional<int64_t> rows;
  kernels::GpuGemmShape gemm; ///< gemm.bias unset: see bias_node
  ValueId a = 0, b = 0, c = 0;
  std::optional<ValueId> bias_node; ///< the epilogue's vector
  std::optional<ValueId> aux_node;  ///< GELU's inputs the epilogue writes (GELU_AUX) or reads
  /// An attention kernel that cuDNN runs instead of `function` (choose_attention).
  std::optional<CudnnAttentionStep> cudnn;
};

/// The launch of a kernel whose changed dim is a parameter (RuntimeRowsKernel::unify): the step
/// kernel's, but as narrow as the kernel at a size no shape holds (an odd prime): a vectorised
/// dim that the size scales cannot promise whole groups of elements.
GpuLaunch sized_launch(const RuntimeRowsKernel& sized, GpuLaunch step_launch);

/// Whether `rows` (RuntimeRowsKernel::of: the row count as the size) is one kernel at every
/// size of `sized` (the same kernel unified with another plan's): then the row count covers
/// what changes between the plans, and also serves other batch sizes. A sum over the batch at
/// each position of a sequence has the batch as its rows and the length in its columns: the
/// row-count form differs per length, the unified one does not.
bool row_count_covers(const RuntimeRowsKernel& rows, const RuntimeRowsKernel& sized);

/// BackendEntry::remember_shapes: the kernels of the step at another shape bucket, so that this
/// bucket's compile makes kernels with the changed dim as a parameter (CudaDevice::sized_kernel).
void remember_shapes_for_cuda(const Prepared& prepared, const Device& device);

/// The device pointer a node will have (used to ask cuBLASLt about an epilogue's real bias).
using NodePointer = std::function<cuda::DevicePtr(ValueId)>;

/// The step's launches in order. Generated kernels are fetched or compiled for `device`
/// (counted in `report`); GEMMs whose neighbouring bias, bias+ReLU, bias+GELU or bias-gradient
/// kernel cuBLASLt can run as an epilogue (`epilogues`: find_gemm_epilogues) absorb it, unless
/// cuBLASLt has no algorithm for that combination, in which case both are launched. Prepares
/// cuBLASLt plans and the workspace now, so nothing is planned during CUDA graph capture. Throws
/// when GEMMs need cuBLASLt and it is missing.
std::vector<GpuLaunchStep> plan_launches(const FusionPlan& fusion,
                                         std::span<const GemmEpilogue> epilogues,
                                         CudaDevice& device, KernelCache& cache,
                                         kernels::Fp32Math fp32, CompileReport& report,
                                         const NodePointer& pointer_of);

/// SINTER_DUMP=launch-plan: the GEMM epilogues chosen (`epilogues`), then each launch: the
/// fusion plan's kernel it runs, its kind, and its grid or GEMM shape.
std::string print_launch_plan(std::span<const GemmEpilogue> epilogues,
                              std::span<const GpuLaunchStep> launches);

} // namespace sinter
