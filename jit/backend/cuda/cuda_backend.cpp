// jit/backend/cuda/cuda_backend.cpp — the CUDA room's backend entry: its graph stages, compile
// (a GpuExecutable), the memory a step will hold on the GPU, and the free memory it has
#include "jit/api.hpp"
#include "jit/backend/backends.hpp"
#include "jit/backend/context.hpp"
#include "jit/backend/cuda/attention_choice.hpp"
#include "jit/backend/cuda/gpu_executable.hpp"
#include "jit/backend/cuda/nvptx_attention.hpp"
#include "jit/backend/cuda/nvptx_schedule.hpp"
#include "jit/runtime/memory_plan.hpp"
#include "jit/settings.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

namespace sinter {

namespace {

/// Whether cuBLASLt writes a `product`-type GEMM's B-column sums in `sum` type as its epilogue
/// (BGRADA) on GPU `ordinal`: a probe plan, asked once per pair and process. Without a driver
/// (planning on a machine with no GPU) it is assumed for sums of the product's type only: the
/// H200's cuBLASLt turned the probe down for a bf16 GEMM's f32 sums (2026-11-29: GPT-2's plan
/// there was the same with those epilogues allowed as with them ruled out).
bool cublaslt_sums_columns(int ordinal, DType product, DType sum) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int>, bool> known;
  std::lock_guard lock(mutex);
  auto key = std::make_tuple(ordinal, static_cast<int>(product), static_cast<int>(sum));
  if (auto found = known.find(key); found != known.end()) return found->second;
  bool sums = product == sum;
  if (cuda::driver()) {
    kernels::CublasLt* blas = kernels::CublasLt::get();
    sums = blas != nullptr;
    try {
      if (blas) {
        CudaDevice::get(ordinal).make_current();
        kernels::GpuGemmShape probe; // a weight gradient Xᵀ·dY, its bias gradient beside
        probe.dtype = product;
        probe.shape = kernels::GemmShape{.m = 256, .n = 256, .k = 4096, .trans_a = true};
        probe.epilogue = kernels::GemmEpilogueOp::bias_gradient;
        probe.bias = 1u << 20; // never dereferenced by planning: only its alignment counts
        probe.bias_dtype = sum;
        blas->prepare(probe);
      }
    } catch (const std::exception&) {
      sums = false;
    }
  }
  known.emplace(key, sums);
  return sums;
}

/// What a step of this plan allocates on the device (plan_memory; an input without a keeping is
/// given per run).
StepMemory step_memory(const Graph& g, const FusionPlan& fusion, const MemoryPlan& memory,
                       const Device& device, std::span<const InputKeeping> keeping) {
  // As the constructor and the first runs allocate, each allocation in whole device pages
  // (device_pages): the arena; the outputs outside it (not those stored over the inputs they
  // replace), in one allocation; the first input
  // set's carried inputs in one allocation and its others in another, and the inputs given
  // per run again in the second set's; the device's GEMM workspace unless it has one already;
  // cuDNN's attention workspace where cuDNN may run the attention (its dq accumulator: the choice
  // is made later, at compile); and an allowance for the kernels' images and the CUDA graphs (the
  // null driver counts the images; a GPT-2 step's are under 2 MiB).
  StepMemory out;
  out.arena = static_cast<int64_t>(device_pages(static_cast<std::size_t>(memory.arena_bytes())));
  std::vector<bool> is_input(g.size(), false);
  for (const NamedValue& in : g.inputs())
    is_input[in.id] = true;
  std::vector<bool> counted(g.size(), false);
  const std::vector<ValueId> storage = storage_over_inputs(fusion); // outputs over inputs
  std::vector<std::size_t> owned_outputs;
  for (const NamedValue& o : g.outputs())
    if (!memory.offset_of(o.id) && !is_input[o.id] && storage[o.id] == o.id && !counted[o.id]) {
      counted[o.id] = true;
      owned_outputs.push_back(byte_size(g.type(o.id)));
    }
  out.outputs = static_cast<int64_t>(device_pages(pack_buffers(owned_outputs).total));
  std::vector<PlannedBuffer> buffers = arena_buffers(g, memory);
  std::vector<std::size_t> carried, others, per_run;
  for (std::size_t i = 0; i < g.inputs().size(); ++i) {
    const NamedValue& in = g.inputs()[i];
    std::size_t bytes = byte_size(g.type(in.id));
    InputKeeping kept = i < keeping.size() ? keeping[i] : InputKeeping::per_run;
    (kept == InputKeeping::carried ? carried : others).push_back(bytes);
    if (kept == InputKeeping::per_run) per_run.push_back(bytes);
    buffers.push_back({"input: " + in.name + " " + to_string(g.type(in.id)),
                       static_cast<int64_t>(std::max<std::size_t>(bytes, 16))});
  }
  out.inputs = static_cast<int64_t>(device_pages(pack_buffers(carried).total) +
                                    device_pages(pack_buffers(others).total) +
                                    device_pages(pack_buffers(per_run).total));
  bool has_gemm = std::any_of(fusion.kernels.begin(), fusion.kernels.end(),
                              [](const Kernel& k) { return k.kind == KernelKind::gemm; });
  bool workspace_there = cuda::driver() && CudaDevice::get(device.ordinal).has_gemm_workspace();
  out.workspace = has_gemm && !workspace_there
                      ? static_cast<int64_t>(device_pages(kernels::CublasLt::workspace_bytes))
                      : 0;
  int capability = cuda::driver() ? CudaDevice::get(device.ordinal).info().compute_capability : 90;
  out.workspace +=
      static_cast<int64_t>(device_pages(cudnn_attention_workspace_bound(fusion, capability)));
  out.runtime = runtime_allowance_bytes;
  out.largest = largest_buffers(std::move(buffers));
  return out;
}

BackendGraphStages cuda_graph_stages(const Graph& optimized, const Device& device) {
  int capability = 90; // an H100 where no GPU can be asked (planning on a build machine)
  if (cuda::driver()) capability = CudaDevice::get(device.ordinal).info().compute_capability;
  NvptxAttentionChoice choice;
  int ordinal = device.ordinal;
  // The backward's GEMM operands are kept, not recomputed, where the step's plan that keeps
  // them fits in what the GPU has free (and in SINTER_MEMORY_LIMIT), counted as plan_memory
  // counts it with every input given per run: more than a step holds, so what fits here fits.
  std::function<bool(const FusionPlan&)> keeping_fits;
  if (cuda::driver())
    keeping_fits = [device](const FusionPlan& plan) {
      int64_t budget = CudaDevice::get(device.ordinal).free_bytes();
      if (std::optional<int64_t> limit = memory_limit_from_environment())
        budget = std::min(budget, *limit);
      MemoryPlan memory(plan);
      return step_memory(*plan.graph, plan, memory, device, {}).total() <= budget;
    };
  BackendGraphStages stages = nvptx_graph_stages(
      optimized, capability, &choice,
      [ordinal](DType product, DType sum) { return cublaslt_sums_columns(ordinal, product, sum); },
      keeping_fits);
  static std::once_flag said_fused, said_decomposed;
  if (choice.fused)
    std::call_once(said_fused, [] {
      log_line("sinter: attention on cuda: fused (NVPTX flash-attention kernels on tensor cores)");
    });
  if (choice.decomposed)
    std::call_once(said_decomposed, [&] {
      log_line("sinter: attention on cuda: decomposed (scores and softmax in memory): " +
               choice.why);
    });
  return stages;
}

std::unique_ptr<Executable> compile_for_cuda(Prepared prepared, const Device& device,
                                             Context& context, CompileRun& run) {
  auto executable = std::make_unique<GpuExecutable>(
      std::move(prepared), CudaDevice::get(device.ordinal), context.cache(), run);
  executable->stage_with(context.pool());
  context.cache().record_run_stats();
  return executable;
}

StepMemory plan_memory_for_cuda(const Prepared& prepared, const Device& device,
                                std::span<const InputKeeping> keeping) {
  return step_memory(*prepared.graph, prepared.fusion, prepared.memory, device, keeping);
}

int64_t cuda_free_memory(const Device& device) {
  return CudaDevice::get(device.ordinal).free_bytes();
}

} // namespace

extern const BackendEntry cuda_backend{Backend::cuda,
                                       "cuda",
                                       true,
                                       cuda_graph_stages,
                                       compile_for_cuda,
                                       plan_memory_for_cuda,
                                       cuda_free_memory,
                                       remember_shapes_for_cuda};

} // namespace sinter
