// jit/backend/cuda/nvptx_target.hpp — the NVPTX target: shared emitter → libdevice → O3 → PTX
#pragma once
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/passes/fuse.hpp"
#include "jit/passes/runtime_rows.hpp"
#include "jit/pipeline/prepare.hpp"

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace llvm {
class Module;
} // namespace llvm

namespace sinter {

/// What for_nvptx did with the graph's fused attention nodes.
struct NvptxAttentionChoice {
  // Nodes: each forward, and each gradient (of q, k or v); not the log-sum-exp.
  int fused = 0;      ///< nodes the NVPTX attention kernels run
  int decomposed = 0; ///< nodes expanded into GEMMs, a softmax and elementwise kernels
  std::string why;    ///< why the first decomposed node was
};

/// The CUDA backend's graph stages for a GPU of `compute_capability`: `decompose-attention`
/// (when some fused attention node needs it: one the NVPTX attention kernels cannot take, see
/// nvptx_attention_unsupported, or all of them under SINTER_ATTENTION=decomposed) expands
/// those nodes into primitives that have a kernel; `rematerialize` recomputes GEMM operands
/// read long after they were computed (recompute_late_gemm_operands). Fused with
/// gpu_fusion_options. `choice`, when given, says what happens to attention.
/// `gemm_sums_columns` (ColumnSplitOptions): which bias gradients `split-reductions` leaves
/// whole for a GEMM's epilogue (the CUDA backend asks cuBLASLt; unset: none).
/// `keeping_fits`: `rematerialize` recomputes nothing when it says the step's fused plan, which
/// keeps the late GEMM operands, fits the device (the CUDA backend counts it as plan_memory
/// does); unset, it always trades their bandwidth for memory (the emulator, the PTX tests).
BackendGraphStages
nvptx_graph_stages(const Graph& optimized, int compute_capability,
                   NvptxAttentionChoice* choice = nullptr,
                   std::function<bool(DType product, DType sum)> gemm_sums_columns = {},
                   std::function<bool(const FusionPlan&)> keeping_fits = {});
/// prepare() with those stages: the graph, kernels and buffers a GPU of `compute_capability`
/// runs (the CUDA executable, its memory planner, the emulator and the PTX tests all use it).
Prepared prepare_for_nvptx(Graph optimized, int compute_capability, CompileRun& run);
/// The graph stages alone (no fusion), in a compile of their own.
Graph for_nvptx(const Graph& optimized, int compute_capability,
                NvptxAttentionChoice* choice = nullptr);

/// The row count a RuntimeRowsKernel's instance is compiled with (and keyed by): a prime no
/// real dim is, so every place the code would use it shows (see NvptxTarget::compile).
inline constexpr int64_t nvptx_rows_extent = 1000003;
inline constexpr int64_t nvptx_rows_extent_check = 1000033;

/// A kernel whose generated code depends on its row count other than through the rows
/// parameter: it is compiled for its shape instead.
struct RowsDependentCode : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Adds to `module` the kernel `name` of a RuntimeRowsKernel for any row count: its instance
/// with nvptx_rows_extent rows, scheduled for `launch` (the step's kernel's), which takes the
/// row count as its last parameter (`i64 rows`). Throws RowsDependentCode when the code depends
/// on the row count otherwise (a second instance, emitted aside, must come out the same).
void emit_rows_kernel(llvm::Module& module, const RuntimeRowsKernel& kernel,
                      const GpuLaunch& launch, const std::string& name);
/// Whether emit_rows_kernel takes the kernel (false: RowsDependentCode), without compiling it.
bool rows_kernel_emits(const RuntimeRowsKernel& kernel, const GpuLaunch& launch);

/// Compiles fused kernels to PTX for one compute capability. Needs no GPU and no driver.
class NvptxTarget {
public:
  /// `compute_capability` as major * 10 + minor: 80 for sm_80 (A100), 90 for sm_90 (H100).
  /// Throws std::invalid_argument for one LLVM's NVPTX backend does not know.
  explicit NvptxTarget(int compute_capability);
  ~NvptxTarget();
  NvptxTarget(const NvptxTarget&) = delete;
  NvptxTarget& operator=(const NvptxTarget&) = delete;

  int compute_capability() const;
  /// "sm_90".
  std::string arch() const;
  /// Everything that changes the generated PTX: sinter and LLVM versions, arch, PTX ISA,
  /// libdevice and the emitter's build. Part of every GPU kernel cache key.
  const std::string& fingerprint() const;

  /// PTX text of a module whose one `.entry` is `symbol`. Kernels that use math functions
  /// get them from libdevice (see find_libdevice); if it is missing, this throws naming it.
  std::string compile(const FusionPlan& plan, const Kernel& kernel, const std::string& symbol);
  /// PTX of a kernel whose row count is its last parameter, for any count (emit_rows_kernel).
  std::string compile(const RuntimeRowsKernel& kernel, const GpuLaunch& launch,
                      const std::string& symbol);

  /// Whether this LLVM's NVPTX backend knows sm_<compute_capability>.
  static bool supports(int compute_capability);
  /// The capability to generate PTX for on a GPU of `compute_capability`: itself when LLVM
  /// knows it, else the newest older one it knows (the driver compiles PTX for newer GPUs).
  static int best_target_for(int compute_capability);

  /// libdevice.10.bc: `$SINTER_LIBDEVICE`, next to libsinter (GPU bundles), `$CUDA_HOME`,
  /// /usr/local/cuda, or Debian's nvidia-cuda-toolkit.
  static std::optional<std::filesystem::path> find_libdevice();

private:
  /// A module for this target with the kernel `emit` adds, libdevice linked where used,
  /// optimised and printed as PTX.
  std::string compile_module(const std::string& symbol,
                             const std::function<void(llvm::Module&)>& emit);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace sinter
