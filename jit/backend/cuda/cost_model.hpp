// jit/backend/cuda/cost_model.hpp — predicted GPU kernel times from a kernel's bytes, FLOPs,
// arithmetic and launch, calibrated on a measured H100 step: what a plan should cost anywhere
#pragma once
#include "jit/backend/cuda/cuda_driver.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/launch_plan.hpp"
#include "jit/profile/profiler.hpp"

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sinter {

/// What a GPU sustains, from its clocks and SM count (docs/gpu.md, "The cost model").
struct GpuRates {
  std::string name;
  int multiprocessors = 0;
  double bytes_per_second = 0;  ///< device memory, read + write
  double tensor_flops = 0;      ///< dense bf16/f16 GEMMs on tensor cores
  double fp32_flops = 0;        ///< FMA lanes (f32 arithmetic outside GEMMs)
  double launch_seconds = 2e-6; ///< the least a kernel takes in a CUDA graph
};
/// The rates of `device`: 88% of its memory's nominal bandwidth (2 × clock × bus width) and
/// 80% of its nominal tensor and FMA rates (SMs × clock × the architecture's per-SM rate), the
/// shares an H100 reached (2.95 TB/s copies, 853 TFLOP/s bf16 GEMMs).
GpuRates gpu_rates(const cuda::DeviceInfo& device);

/// What the model needs of a kernel: its launch, what it moves and computes, and the arithmetic
/// per element of its widest output (library calls are priced by their FLOPs).
struct KernelWork {
  std::string name;
  KernelKind kind = KernelKind::loop;
  GpuStrategy strategy = GpuStrategy::elementwise;
  bool gradient = false;     ///< attention: the backward kernel
  bool tensor_cores = false; ///< GEMMs: bf16/f16 (f32 GEMMs run on the FMA lanes)
  bool cudnn = false;        ///< attention run by cuDNN's fused SDPA (docs/gpu.md)
  int64_t blocks = 1, threads = 256;
  int64_t bytes = 0, flops = 0;
  int64_t elements = 0;       ///< of the widest output
  int64_t transcendental = 0; ///< exp, log, tanh, erf, pow, div, sqrt, rsqrt per element
  int64_t arithmetic = 0;     ///< other nodes per element (index algebra included)
  int64_t outputs = 1;
  /// Column reductions: the rows each thread loads before it adds any (gpu_column_split_unroll;
  /// 1 in kernels profiled before 2026-11-28). A block far from the memory's rate is bound by
  /// its loads in flight.
  int64_t rows_in_flight = 1;
  /// Column reductions: the neighbouring columns each thread loads at once (GpuLaunch::
  /// vector_width; 1 in kernels profiled before 2026-11-30).
  int64_t vector_width = 1;
  /// Row kernels with a block per row (rows too long for a warp: GPT-2's loss over 50257
  /// logits): the bytes each pass over the row after the first reads again. Such a row does not
  /// stay in the SM's cache from one pass to the next.
  int64_t reread_bytes = 0;
  /// Scatters that own their output rows (GpuStrategy::owned_scatter): the tiles of indices
  /// each block walks, one index a thread, two barriers a tile.
  int64_t scan_tiles = 0;
  /// GEMMs whose cuBLASLt epilogue writes or reads a matrix of GELU inputs besides D
  /// (GELU_AUX_BIAS, DGELU): its bytes, streamed as the tiles finish.
  int64_t epilogue_bytes = 0;
};

/// `kind=loop strategy=elementwise gradient=0 ... outputs=1`: every field, as SINTER_DUMP=plan
/// prints it (then ` library=cudnn` for attention cuDNN runs, ` rows_in_flight=N` and
/// ` vector_width=N` where they are not 1, ` reread_bytes=N`, ` scan_tiles=N` and
/// ` epilogue_bytes=N` where they are not 0); parse_work reads it back
/// (nullopt for anything else).
std::string describe(const KernelWork& work);
std::optional<KernelWork> parse_work(std::string_view text);

/// The share of a causal attention's [tq, tk] scores that are computed (query i sees keys
/// 0..i): cuDNN's kernels skip the rest, and their FLOPs are counted so; the profiler counts all.
double causal_scores_share(int64_t tq, int64_t tk);

/// The work of each launch of a step's plan, named and measured as the profiler does (a causal
/// cuDNN attention's FLOPs scaled by causal_scores_share).
std::vector<KernelWork> plan_work(const FusionPlan& plan, std::span<const GpuLaunchStep> launches,
                                  std::span<const profile::KernelInfo> infos);

/// A kernel's predicted time and what bounds it (`memory`, `arithmetic`, `columns`: a column
/// reduction's few blocks, `tensor cores`, `attention`, `launch`).
struct KernelPrediction {
  double seconds = 0;
  const char* bound = "launch";
};
KernelPrediction predict_kernel(const KernelWork& work, const GpuRates& rates);

/// The `plan` stage: each launch's work, and in `infos` (describe_kernels: one per kernel of
/// `plan`) each kernel's predicted time per step (0 for one a GEMM absorbed).
std::vector<KernelWork> predict_plan(const FusionPlan& plan,
                                     std::span<const GpuLaunchStep> launches,
                                     std::vector<profile::KernelInfo>& infos,
                                     const GpuRates& rates);

/// SINTER_DUMP=plan: each launch with its prediction, then the step's sum (kernels back to back
/// in one CUDA graph), ending with `predicted_step_ms=<ms> device=<name>`.
std::string print_predictions(std::span<const KernelWork> work, const GpuRates& rates);

} // namespace sinter
