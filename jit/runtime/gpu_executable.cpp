// jit/runtime/gpu_executable.cpp — device pointers per value, launch list, staging, graph replay
#include "jit/runtime/gpu_executable.hpp"

#include "jit/codegen/emitter.hpp"
#include "jit/runtime/gemm_epilogue.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

namespace sinter {

/// One enqueued operation of the step, with its arguments fixed at construction.
struct GpuExecutable::Launch {
  KernelKind kind = KernelKind::loop;
  cuda::FunctionHandle function = nullptr;
  GpuLaunch shape;
  std::vector<cuda::DevicePtr> arguments; ///< output, then reads
  std::vector<void*> parameters;          ///< pointers into `arguments`, for cuLaunchKernel
  std::size_t clear_bytes = 0;            ///< cleared before the launch (atomic scatter)
  kernels::GpuGemmShape gemm;
  cuda::DevicePtr a = 0, b = 0, c = 0;
};

/// A carried value: where it lives on the device, and which run made it.
struct GpuExecutable::Carried {
  std::size_t input = 0, output = 0;
  std::shared_ptr<DeviceBuffer> buffer;        ///< the input's buffer: holds the latest value
  std::shared_ptr<std::atomic<uint64_t>> runs; ///< bumped by each run that replaces it
  std::shared_ptr<const DeferredBytes> latest; ///< handed out by the last run
  std::size_t bytes = 0;
};

namespace {

/// The value of a carried output after one run, read from the device on demand.
class ResidentValue final : public DeferredBytes {
public:
  ResidentValue(CudaDevice& device, std::shared_ptr<DeviceBuffer> buffer,
                std::shared_ptr<std::atomic<uint64_t>> runs, std::size_t bytes)
      : device_(device), buffer_(std::move(buffer)), runs_(std::move(runs)), run_(runs_->load()),
        bytes_(bytes) {}
  void fetch(std::span<std::byte> into) const override {
    if (runs_->load() != run_)
      throw std::logic_error("sinter: a GPU-resident value was read after a later step replaced "
                             "it; copy a tensor (HostTensor copies fetch) before the next step");
    device_.make_current();
    const cuda::Driver& d = device_.driver();
    d.check(d.cuMemcpyDtoH(into.data(), buffer_->get(), std::min(bytes_, into.size())),
            "cuMemcpyDtoH (fetching a GPU-resident value)");
  }

private:
  CudaDevice& device_;
  std::shared_ptr<DeviceBuffer> buffer_; // kept alive: the tensor may outlive the executable
  std::shared_ptr<std::atomic<uint64_t>> runs_;
  uint64_t run_;
  std::size_t bytes_;
};

/// Replays become a CUDA graph after this many direct runs (the first runs also catch errors
/// with precise call sites).
constexpr int direct_runs_before_graph = 2;

bool graphs_enabled() {
  const char* v = std::getenv("SINTER_CUDA_GRAPH");
  return !v || std::string_view(v) != "0";
}

std::size_t bytes_of(const TensorType& t) {
  return static_cast<std::size_t>(numel(t.shape)) * dtype_bytes(t.dtype);
}

std::size_t aligned(std::size_t n) { return (n + 255) / 256 * 256; }

} // namespace

GpuExecutable::GpuExecutable(Graph graph, CudaDevice& device, KernelCache& cache)
    : graph_(std::make_unique<Graph>(std::move(graph))), fusion_(fuse(*graph_)), memory_(fusion_),
      device_(device), fp32_(kernels::fp32_math_from_environment()) {
  auto start = std::chrono::steady_clock::now();
  device_.make_current();
  const Graph& g = *graph_;
  arena_ = DeviceBuffer(static_cast<std::size_t>(std::max<int64_t>(memory_.arena_bytes(), 0)));
  std::vector<cuda::DevicePtr> pointer(g.size(), 0);
  auto own = [&](ValueId id) {
    owned_.push_back(
        std::make_shared<DeviceBuffer>(std::max<std::size_t>(bytes_of(g.type(id)), 16)));
    pointer[id] = owned_.back()->get();
  };
  std::size_t staged_in = 0;
  for (const NamedValue& in : g.inputs()) {
    own(in.id);
    input_targets_.push_back(pointer[in.id]);
    input_offsets_.push_back(staged_in);
    staged_in += aligned(bytes_of(g.type(in.id)));
  }
  for (const BufferSlot& slot : memory_.slots())
    pointer[slot.node] = arena_.get() + static_cast<cuda::DevicePtr>(slot.offset);
  std::size_t staged_out = 0;
  for (const NamedValue& out : g.outputs()) {
    if (!pointer[out.id]) own(out.id); // kernel roots that are outputs get their own buffer
    output_sources_.push_back(pointer[out.id]);
    output_offsets_.push_back(staged_out);
    staged_out += aligned(bytes_of(g.type(out.id)));
  }
  input_carried_.assign(g.inputs().size(), false);
  output_carried_.assign(g.outputs().size(), false);
  staging_in_ = PinnedBuffer(staged_in);
  staging_out_ = PinnedBuffer(staged_out);

  report_.kernels = fusion_.kernels.size();
  kernels::CublasLt* blas = nullptr;
  auto gemm_launch = [&](const Kernel& kernel, const GemmEpilogue* epilogue) {
    if (!blas && !(blas = kernels::CublasLt::get()))
      throw std::runtime_error("sinter: GEMMs on CUDA need cuBLASLt: " +
                               kernels::CublasLt::unavailable_reason());
    Launch launch;
    launch.kind = KernelKind::gemm;
    Shape a = g.type(kernel.gemm_a.logical).shape, c = g.type(kernel.root).shape;
    kernels::GpuGemmShape& gemm = launch.gemm;
    gemm.dtype = g.type(kernel.root).dtype;
    gemm.fp32 = fp32_;
    gemm.shape.m = c[c.size() - 2];
    gemm.shape.n = c.back();
    gemm.shape.k = kernel.gemm_a.transposed ? a[a.size() - 2] : a.back();
    gemm.shape.trans_a = kernel.gemm_a.transposed;
    gemm.shape.trans_b = kernel.gemm_b.transposed;
    gemm.batch = numel(c) / std::max<int64_t>(1, gemm.shape.m * gemm.shape.n);
    launch.a = pointer[kernel.gemm_a.buffer];
    launch.b = pointer[kernel.gemm_b.buffer];
    launch.c = pointer[kernel.root];
    if (epilogue) {
      const Kernel& absorbed = fusion_.kernels[epilogue->absorbed];
      switch (epilogue->kind) {
      case EpilogueKind::bias:
      case EpilogueKind::relu_bias:
      case EpilogueKind::gelu_bias:
        gemm.epilogue = epilogue->kind == EpilogueKind::bias ? kernels::GemmEpilogueOp::bias
                        : epilogue->kind == EpilogueKind::relu_bias
                            ? kernels::GemmEpilogueOp::relu_bias
                            : kernels::GemmEpilogueOp::gelu_bias;
        gemm.bias = pointer[epilogue->bias];
        launch.c = pointer[absorbed.root]; // the GEMM writes the absorbed kernel's result
        break;
      case EpilogueKind::bias_gradient:
        gemm.epilogue = kernels::GemmEpilogueOp::bias_gradient;
        gemm.bias = pointer[absorbed.root]; // the GEMM writes the reduction's result too
        break;
      }
    }
    blas->prepare(gemm); // descriptors and algorithm now, never during graph capture
    device_.gemm_workspace();
    return launch;
  };
  // Kernels that cuBLASLt can run as a GEMM's epilogue are absorbed into it, unless cuBLASLt
  // has no algorithm for that combination (then both run as usual).
  std::vector<std::optional<Launch>> gemm_launches(fusion_.kernels.size());
  std::vector<bool> absorbed(fusion_.kernels.size(), false);
  for (const GemmEpilogue& e : find_gemm_epilogues(fusion_, memory_)) {
    try {
      gemm_launches[e.gemm] = gemm_launch(fusion_.kernels[e.gemm], &e);
    } catch (const std::runtime_error&) {
      continue;
    }
    absorbed[e.absorbed] = true;
    --report_.kernels;
  }
  for (std::size_t index = 0; index < fusion_.kernels.size(); ++index) {
    const Kernel& kernel = fusion_.kernels[index];
    if (absorbed[index]) continue;
    if (kernel.kind == KernelKind::gemm) {
      launches_.push_back(gemm_launches[index] ? std::move(*gemm_launches[index])
                                               : gemm_launch(kernel, nullptr));
      continue;
    }
    Launch launch;
    launch.kind = kernel.kind;
    launch.function = device_.kernel(fusion_, kernel, cache, report_);
    launch.shape = gpu_launch(g, kernel);
    launch.arguments.push_back(pointer[kernel.root]);
    for (ValueId r : kernel.reads)
      launch.arguments.push_back(pointer[r]);
    if (launch.shape.zero_output_first) launch.clear_bytes = bytes_of(g.type(kernel.root));
    launches_.push_back(std::move(launch));
  }
  const cuda::Driver& d = device_.driver();
  d.check(d.cuEventCreate(&step_start_, 0), "cuEventCreate");
  d.check(d.cuEventCreate(&step_end_, 0), "cuEventCreate");
  // Parameters point into each launch's own argument vector, now that none will move.
  for (Launch& launch : launches_)
    for (cuda::DevicePtr& argument : launch.arguments)
      launch.parameters.push_back(&argument);
  report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

GpuExecutable::~GpuExecutable() {
  const cuda::Driver& d = device_.driver();
  if (graph_exec_) d.cuGraphExecDestroy(graph_exec_);
  if (graph_handle_) d.cuGraphDestroy(graph_handle_);
  if (step_start_) d.cuEventDestroy(step_start_);
  if (step_end_) d.cuEventDestroy(step_end_);
}

void GpuExecutable::enqueue_step() const {
  const cuda::Driver& d = device_.driver();
  cuda::StreamHandle stream = device_.stream();
  const Graph& g = *graph_;
  for (std::size_t i = 0; i < input_targets_.size(); ++i)
    if (std::size_t n = bytes_of(g.type(g.inputs()[i].id)); n && !input_carried_[i])
      d.check(
          d.cuMemcpyHtoDAsync(input_targets_[i], staging_in_.data() + input_offsets_[i], n, stream),
          "cuMemcpyHtoDAsync");
  for (const Launch& launch : launches_) {
    if (launch.kind == KernelKind::gemm) {
      kernels::CublasLt::get()->matmul(launch.gemm, launch.a, launch.b, launch.c,
                                       device_.gemm_workspace(), stream);
      continue;
    }
    if (launch.shape.items == 0) continue;
    if (launch.clear_bytes)
      d.check(d.cuMemsetD8Async(launch.arguments[0], 0, launch.clear_bytes, stream),
              "cuMemsetD8Async");
    d.check(d.cuLaunchKernel(launch.function, static_cast<unsigned>(launch.shape.blocks), 1, 1,
                             static_cast<unsigned>(launch.shape.threads), 1, 1, 0, stream,
                             const_cast<void**>(launch.parameters.data()), nullptr),
            "cuLaunchKernel");
  }
  // Carried outputs become the next run's inputs on the device; the rest go to the host.
  for (const Carried& c : carried_)
    if (c.bytes)
      d.check(d.cuMemcpyDtoDAsync(c.buffer->get(), output_sources_[c.output], c.bytes, stream),
              "cuMemcpyDtoDAsync");
  for (std::size_t i = 0; i < output_sources_.size(); ++i)
    if (std::size_t n = bytes_of(g.type(g.outputs()[i].id)); n && !output_carried_[i])
      d.check(d.cuMemcpyDtoHAsync(staging_out_.data() + output_offsets_[i], output_sources_[i], n,
                                  stream),
              "cuMemcpyDtoHAsync");
}

void GpuExecutable::set_carried(
    std::span<const std::pair<std::size_t, std::size_t>> input_from_output) {
  std::lock_guard lock(run_mutex_);
  const Graph& g = *graph_;
  for (auto [in, out] : input_from_output) {
    if (in >= g.inputs().size() || out >= g.outputs().size() ||
        !(g.type(g.inputs()[in].id) == g.type(g.outputs()[out].id)) || input_carried_[in] ||
        output_carried_[out])
      throw std::invalid_argument("sinter: carried pair (input " + std::to_string(in) +
                                  ", output " + std::to_string(out) +
                                  ") does not name an input and an output of one type, each "
                                  "carried once");
    Carried c;
    c.input = in;
    c.output = out;
    c.buffer = owned_.at(in); // the inputs own the first buffers, in input order
    c.runs = std::make_shared<std::atomic<uint64_t>>(0);
    c.bytes = bytes_of(g.type(g.inputs()[in].id));
    carried_.push_back(std::move(c));
    input_carried_[in] = true;
    output_carried_[out] = true;
  }
  // A step captured before no longer matches: capture again after two direct runs.
  const cuda::Driver& d = device_.driver();
  if (graph_exec_) d.cuGraphExecDestroy(graph_exec_);
  if (graph_handle_) d.cuGraphDestroy(graph_handle_);
  graph_exec_ = nullptr;
  graph_handle_ = nullptr;
  runs_ = 0;
}

void GpuExecutable::capture() const {
  const cuda::Driver& d = device_.driver();
  cuda::StreamHandle stream = device_.stream();
  d.check(d.cuStreamBeginCapture(stream, cuda::stream_capture_thread_local),
          "cuStreamBeginCapture");
  try {
    enqueue_step();
  } catch (...) {
    cuda::GraphHandle discarded = nullptr;
    d.cuStreamEndCapture(stream, &discarded);
    if (discarded) d.cuGraphDestroy(discarded);
    throw;
  }
  d.check(d.cuStreamEndCapture(stream, &graph_handle_), "cuStreamEndCapture");
  d.check(d.cuGraphInstantiateWithFlags(&graph_exec_, graph_handle_, 0),
          "cuGraphInstantiateWithFlags");
}

void GpuExecutable::run_into(std::span<const HostTensor* const> inputs,
                             std::span<HostTensor> results) const {
  std::lock_guard lock(run_mutex_);
  device_.make_current();
  const Graph& g = *graph_;
  const cuda::Driver& d = device_.driver();
  auto stage = [&](std::size_t i) {
    std::memcpy(staging_in_.data() + input_offsets_[i], inputs[i]->bytes().data(),
                inputs[i]->bytes().size());
  };
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!input_carried_[i]) stage(i);
  d.check(d.cuEventRecord(step_start_, device_.stream()), "cuEventRecord");
  // A carried input still holding what the last run left on the device is not copied again.
  for (const Carried& c : carried_) {
    const DeferredBytes* source = inputs[c.input]->unwritten_source();
    if ((source && source == c.latest.get()) || c.bytes == 0) continue;
    stage(c.input);
    d.check(d.cuMemcpyHtoDAsync(c.buffer->get(), staging_in_.data() + input_offsets_[c.input],
                                c.bytes, device_.stream()),
            "cuMemcpyHtoDAsync");
  }
  if (!graph_exec_ && graphs_enabled() && runs_ >= direct_runs_before_graph) capture();
  if (graph_exec_)
    d.check(d.cuGraphLaunch(graph_exec_, device_.stream()), "cuGraphLaunch");
  else
    enqueue_step();
  d.check(d.cuEventRecord(step_end_, device_.stream()), "cuEventRecord");
  ++runs_;
  d.check(d.cuStreamSynchronize(device_.stream()), "cuStreamSynchronize (running the step)");
  float ms = 0;
  d.check(d.cuEventElapsedTime(&ms, step_start_, step_end_), "cuEventElapsedTime");
  last_step_ms_ = ms;
  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    const TensorType& t = g.type(g.outputs()[i].id);
    // (byte_size: what an output tensor held before is overwritten, never fetched.)
    if (results[i].dtype() != t.dtype || results[i].shape() != t.shape ||
        results[i].byte_size() != bytes_of(t))
      results[i] = HostTensor(t.dtype, t.shape);
    if (output_carried_[i]) continue;
    std::memcpy(results[i].bytes().data(), staging_out_.data() + output_offsets_[i], bytes_of(t));
  }
  for (Carried& c : carried_) {
    c.runs->fetch_add(1); // values handed out by earlier runs are no longer on the device
    c.latest = std::make_shared<ResidentValue>(device_, c.buffer, c.runs, c.bytes);
    results[c.output].defer(c.latest);
  }
}

} // namespace sinter
