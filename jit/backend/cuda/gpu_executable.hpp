// jit/backend/cuda/gpu_executable.hpp — a compiled step on a GPU: runs the launch plan over a
// device arena with alternating input sets, CUDA graphs, carried state and deferred outputs
#pragma once
#include "jit/backend/backends.hpp"
#include "jit/backend/cuda/cuda_device.hpp"
#include "jit/backend/cuda/gpu_numerics.hpp"
#include "jit/backend/cuda/launch_plan.hpp"
#include "jit/backend/device.hpp"
#include "jit/backend/executable.hpp"
#include "jit/profile/profiler.hpp"
#include "kernels/cuda/cublaslt_gemm.hpp"
#include "kernels/cuda/nccl_bridge.hpp"

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace sinter {

/// A step on one GPU. Runs are asynchronous: run_into() stages the inputs, enqueues the step
/// and returns; the outputs come back as deferred HostTensors (HostTensor::defer) that wait
/// for the step when first read. Two input sets alternate (device input buffers, pinned
/// staging, captured CUDA graph), so the next step's inputs are copied on a second stream
/// while the current step still runs.
/// What a CUDA step's plan adds for the driver's own allocations: kernel images and CUDA graphs.
inline constexpr int64_t runtime_allowance_bytes = int64_t{64} << 20;

class GpuExecutable final : public Executable {
public:
  /// Allocates the device arena of a prepared graph (prepare_for_nvptx) and the first input
  /// set's buffers, plans the launches (`launch-plan`: GEMM epilogues) and fetches or compiles
  /// every kernel for `device` (`kernels`), the stages through `run`. The second input set and
  /// the pinned staging wait for the first run, when carried and resident inputs are known:
  /// those get one device buffer and no staging.
  GpuExecutable(Prepared prepared, CudaDevice& device, KernelCache& cache, CompileRun& run);
  /// Prepares an optimised graph itself for `device` (no dumps), then as above.
  GpuExecutable(const Graph& optimized, CudaDevice& device, KernelCache& cache);
  /// Waits for the last steps and keeps every output handed out readable.
  ~GpuExecutable();

  /// Enqueues one step. Batch inputs are copied into pinned memory before it returns (the
  /// caller may change them right away); carried and resident inputs the host changed go up
  /// straight from the tensor (the driver copies pageable memory before returning). The outputs
  /// are deferred (fetched on first access). The first
  /// two runs wait for the step, so errors name their call; from then on each input set's
  /// step is one CUDA graph launch.
  void run_into(std::span<const HostTensor* const> inputs,
                std::span<HostTensor> outputs) const override;

  /// Declares (input, output) pairs where the output is the next run's input (parameters and
  /// optimizer state). Their values then stay on the GPU: each run copies the output into the
  /// input's device buffer, hands the output back deferred (fetched from the device on first
  /// access), and skips the upload of an input whose tensor still holds the latest such
  /// deferred value unwritten.
  void set_carried(std::span<const std::pair<std::size_t, std::size_t>> input_from_output) override;
  void set_resident(std::span<const std::size_t> inputs) override;

  /// Copies large batch inputs into pinned staging on `pool`'s threads (one memcpy of a
  /// ViT-B batch of 256 images, 154 MB, is 20 ms of host time per step on one core).
  void stage_with(ThreadPool& pool) { staging_pool_ = &pool; }

  const Graph& graph() const { return *graph_; }
  const FusionPlan& fusion() const { return fusion_; }
  const MemoryPlan& memory_plan() const override { return memory_; }
  const CompileReport& report() const override { return report_; }
  const FusionPlan* fusion_plan() const override { return &fusion_; }
  /// Whether the last run was a CUDA graph launch (`SINTER_CUDA_GRAPH=0` turns them off).
  bool uses_graph() const { return last_run_was_graph_; }
  /// GPU time of the last step, kernels to copies out (CUDA events), in milliseconds; waits
  /// for that step.
  double last_step_device_ms() const;

private:
  /// The `buffers` stage: the arena, each output outside it, the first input set's device
  /// buffers, and both sets' events.
  void allocate_buffers();
  /// Places the staged inputs and outputs (those not carried or resident) in the staging
  /// buffers, and makes every set ready again (after set_carried or set_resident).
  void layout_staging();
  /// Lays the first set's inputs out again, the carried ones in an allocation of their own: a
  /// carried value handed out keeps its allocation alive after the step is gone, and must not
  /// keep the batch's buffers with it. Only before the first run.
  void separate_carried_inputs();
  GpuExecutable(const Graph& optimized, CudaDevice& device, KernelCache& cache, CompileRun&& run);

  struct Bound;
  struct Carried;
  struct InputSet;
  cuda::DevicePtr pointer_for(const InputSet& set, ValueId node) const;
  /// The value a kernel stores over graph input `input` (Kernel::over_inputs), if any.
  std::optional<ValueId> value_over_input(std::size_t input) const;
  void bind(InputSet& set) const;
  /// Destroys the set's captured CUDA graph: the next graph run captures it again.
  void drop_graph(InputSet& set) const;
  /// Gives `set` what it lacks before it runs: its own device buffer for each input that is
  /// neither carried nor resident (those share the first set's), its pinned staging for the
  /// batch inputs and the non-carried outputs, and its bound launches.
  void make_ready(InputSet& set) const;

  /// Enqueues every launch and the output copies. With `marks` (launches_.size() + 1 events,
  /// a profiled run), marks[i] is recorded before launch i and the last after the last one.
  /// With `numerics` (--check-numerics), each launch's outputs are checked after it.
  void enqueue_body(const InputSet& set, std::span<const cuda::EventHandle> marks = {},
                    GpuNumericsCheck* numerics = nullptr) const;
  /// A profiled run's launches, timed by the events around them (on the track "cuda stream").
  void report_kernel_times(profile::ProgramRun& run, int64_t enqueued) const;
  void capture(InputSet& set) const;
  void settle(InputSet& set) const;

  std::unique_ptr<Graph> graph_;
  FusionPlan fusion_;
  MemoryPlan memory_;
  CudaDevice& device_;
  kernels::Fp32Math fp32_;
  DeviceBuffer arena_;
  DeviceBuffer attention_workspace_;      ///< cuDNN's attention calls' scratch (the largest's size)
  std::vector<DeviceSpan> owned_outputs_; ///< kernel roots that are outputs, one allocation
  std::vector<cuda::DevicePtr> pointer_;  ///< by node: arena slots and owned outputs
  std::vector<int> input_index_;          ///< by node: its graph input position, or -1
  std::vector<std::size_t> input_offsets_, output_offsets_; ///< in the staging buffers
  std::size_t staged_in_bytes_ = 0, staged_out_bytes_ = 0;
  std::vector<GpuLaunchStep> launches_; ///< the plan: what runs, in order
  /// Each kernel of fusion_ as the profiler names it, with the cost model's time on this GPU.
  std::vector<profile::KernelInfo> kernel_infos_;
  mutable std::array<std::unique_ptr<InputSet>, 2> sets_;
  mutable std::vector<Carried> carried_;
  std::vector<bool> input_carried_, output_carried_;
  /// Resident inputs (set_resident): one buffer in both sets, and the stamp of the host value
  /// last uploaded into it (0: none yet).
  mutable std::vector<std::pair<std::size_t, uint64_t>> resident_;
  std::vector<bool> input_resident_;
  CompileReport report_;
  ThreadPool* staging_pool_ = nullptr;
  /// The step's collectives between GPU ranks (made on the first run of a graph that has
  /// any, when NCCL is there or the job has several ranks).
  mutable std::unique_ptr<kernels::NcclCommunicator> nccl_;
  mutable std::unique_ptr<GpuNumericsCheck> numerics_; ///< made by the first checked run
  int64_t collective_ranks_ = 0; ///< the ranks its collectives were built for (0: none)
  mutable std::mutex run_mutex_;
  mutable int runs_ = 0;
  mutable bool ran_ = false; ///< a run has written the input sets (their layout is fixed)
  mutable int last_set_ = -1;
  mutable bool last_run_was_graph_ = false;
  uint64_t profile_id_ = profile::new_program_id(); ///< its kernel table in a profile
  /// A profiled run's events: one before each launch and one after the last, then the upload's
  /// start (made on the first profiled run).
  mutable std::vector<cuda::EventHandle> marks_;
};

/// CUDA's entry in the backend table (devices `cuda:N`). Graph stages: nvptx_graph_stages for
/// the device's compute capability, or sm_90 where no driver is loadable (planning on a build
/// machine), saying once per process how attention runs. Kernels cached in the context's
/// cache. The memory plan is what GpuExecutable allocates: the arena, outputs, input buffers
/// (two sets; one copy where carried or resident) and the cuBLASLt workspace. Free memory is
/// cuMemGetInfo's (std::runtime_error saying why without a driver).
extern const BackendEntry cuda_backend;

} // namespace sinter
