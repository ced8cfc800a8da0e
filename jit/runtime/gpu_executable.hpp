// jit/runtime/gpu_executable.hpp — a compiled step on a GPU: device arena, launches, CUDA graph
#pragma once
#include "jit/codegen/kernel_library.hpp"
#include "jit/runtime/cuda_device.hpp"
#include "jit/runtime/host_tensor.hpp"
#include "jit/runtime/memory_plan.hpp"
#include "kernels/cublaslt_gemm.hpp"

#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace sinter {

class GpuExecutable {
public:
  /// Fuses `graph` (primitives only), plans its memory, allocates the device arena and the
  /// pinned staging buffers, and fetches or compiles every kernel for `device`.
  GpuExecutable(Graph graph, CudaDevice& device, KernelCache& cache);
  ~GpuExecutable();

  /// Runs one step: inputs are staged into pinned memory and copied asynchronously, the
  /// kernels and GEMMs run on the device's stream, outputs come back through pinned memory.
  /// From the third call on, the whole step is one CUDA graph launch.
  void run_into(std::span<const HostTensor* const> inputs, std::span<HostTensor> outputs) const;

  /// Declares (input, output) pairs where the output is the next run's input (parameters and
  /// optimizer state). Their values then stay on the GPU: each run copies the output into the
  /// input's device buffer, hands the output back deferred (HostTensor::defer: fetched from
  /// the device on first access), and skips the upload of an input whose tensor still holds
  /// the latest such deferred value unwritten.
  void set_carried(std::span<const std::pair<std::size_t, std::size_t>> input_from_output);

  const Graph& graph() const { return *graph_; }
  const FusionPlan& fusion() const { return fusion_; }
  const MemoryPlan& memory_plan() const { return memory_; }
  const CompileReport& report() const { return report_; }
  /// Whether steps are replayed as a CUDA graph now (`SINTER_CUDA_GRAPH=0` turns it off).
  bool uses_graph() const { return graph_exec_ != nullptr; }
  /// GPU time of the last step, from copies in to copies out (CUDA events), in milliseconds.
  double last_step_device_ms() const { return last_step_ms_; }

private:
  struct Launch;
  struct Carried;
  void enqueue_step() const;
  void capture() const;

  std::unique_ptr<Graph> graph_;
  FusionPlan fusion_;
  MemoryPlan memory_;
  CudaDevice& device_;
  kernels::Fp32Math fp32_;
  DeviceBuffer arena_;
  std::vector<std::shared_ptr<DeviceBuffer>> owned_; ///< inputs and outputs outside the arena
  PinnedBuffer staging_in_, staging_out_;
  std::vector<std::size_t> input_offsets_, output_offsets_; ///< in the staging buffers
  std::vector<cuda::DevicePtr> output_sources_;             ///< where each output lives
  std::vector<cuda::DevicePtr> input_targets_;
  std::vector<Launch> launches_;
  mutable std::vector<Carried> carried_;
  std::vector<bool> input_carried_, output_carried_;
  CompileReport report_;
  mutable std::mutex run_mutex_;
  mutable int runs_ = 0;
  mutable cuda::GraphHandle graph_handle_ = nullptr;
  mutable cuda::GraphExecHandle graph_exec_ = nullptr;
  cuda::EventHandle step_start_ = nullptr, step_end_ = nullptr; ///< brackets of a step
  mutable double last_step_ms_ = 0;
};

} // namespace sinter
