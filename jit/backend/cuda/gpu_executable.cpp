// jit/backend/cuda/gpu_executable.cpp — executes the launch plan: binding per input set, staging,
// overlapped uploads, graph capture and replay, carried values, deferred outputs
#include "jit/backend/cuda/gpu_executable.hpp"
#include "jit/api.hpp"
#include "jit/backend/backends.hpp"
#include "jit/backend/context.hpp"
#include "jit/backend/cpu/thread_pool.hpp"
#include "jit/backend/cuda/cost_model.hpp"
#include "jit/backend/cuda/deferred_outputs.hpp"
#include "jit/backend/cuda/gemm_epilogue.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/dist/collective_launch.hpp"
#include "jit/profile/gpu_peak.hpp"
#include "jit/profile/kernel_costs.hpp"
#include "jit/profile/numerics_check.hpp"
#include "jit/profile/phase_timer.hpp"
#include "jit/settings.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace sinter {

/// A launch with one input set's device pointers.
struct GpuExecutable::Bound {
  std::vector<cuda::DevicePtr> arguments;
  std::vector<void*> parameters; ///< pointers into `arguments` (and `rows`), for cuLaunchKernel
  int64_t rows = 0;              ///< the kernel's rows parameter, when it takes one
  kernels::GpuGemmShape gemm;
  cuda::DevicePtr a = 0, b = 0, c = 0;
  kernels::CudnnAttentionBuffers attention; ///< a cuDNN attention call's buffers
};

namespace {

/// Direct runs before steps are captured as CUDA graphs; they also wait for the step, so an
/// error is reported by the call that caused it.
constexpr int direct_runs_before_graph = 2;

bool graphs_enabled() {
  const char* v = setting("SINTER_CUDA_GRAPH");
  return !v || std::string_view(v) != "0";
}

std::size_t aligned(std::size_t n) { return (n + 255) / 256 * 256; }

} // namespace

/// What alternates between runs: device buffers for the inputs, pinned staging, launches bound
/// to those buffers, the captured graph, the events, and the outputs still in its staging.
struct GpuExecutable::InputSet {
  std::vector<DeviceSpan> inputs;       ///< per graph input (carried: shared), in one allocation
  PinnedBuffer staging_in, staging_out; ///< batch inputs and non-carried outputs only
  bool ready = false;                   ///< buffers, staging and launches in place (make_ready)
  std::vector<Bound> bound;
  cuda::GraphHandle graph = nullptr;
  cuda::GraphExecHandle exec = nullptr;
  std::shared_ptr<SetEvents> events;
  bool in_flight = false; ///< a run on this set may not have finished
  std::vector<std::weak_ptr<const StagedValue>> staged;
};

/// A carried value: where it lives on the device, and which run made it.
struct GpuExecutable::Carried {
  std::size_t input = 0, output = 0;
  DeviceSpan buffer;                           ///< the input's buffer in both sets
  std::shared_ptr<std::atomic<uint64_t>> runs; ///< bumped by each run that replaces it
  std::shared_ptr<const DeferredBytes> latest; ///< handed out by the last run
  std::size_t bytes = 0;
  /// The step writes the output into the input's buffer itself (Kernel::over_inputs, or an
  /// output that is the input): nothing to copy after the run.
  bool in_place = false;
};

GpuExecutable::GpuExecutable(const Graph& optimized, CudaDevice& device, KernelCache& cache)
    : GpuExecutable(optimized, device, cache, CompileRun("program", false, DumpSelection(""))) {}

GpuExecutable::GpuExecutable(const Graph& optimized, CudaDevice& device, KernelCache& cache,
                             CompileRun&& run)
    : GpuExecutable(prepare_for_nvptx(optimized, device.info().compute_capability, run), device,
                    cache, run) {}

GpuExecutable::GpuExecutable(Prepared prepared, CudaDevice& device, KernelCache& cache,
                             CompileRun& run)
    : graph_(std::move(prepared.graph)), fusion_(std::move(prepared.fusion)),
      memory_(std::move(prepared.memory)), device_(device),
      fp32_(kernels::fp32_math_from_environment()) {
  auto start = std::chrono::steady_clock::now();
  device_.make_current();
  const Graph& g = *graph_;
  collective_ranks_ = collective_ranks(g);
  run.timed("buffers", [&] { allocate_buffers(); });
  // What to launch is decided once, from the fusion and memory plans; an epilogue cuBLASLt
  // turns down for the real buffers is planned as separate kernels.
  std::vector<GemmEpilogue> epilogues =
      run.timed("launch-plan", [&] { return find_gemm_epilogues(fusion_, memory_); });
  launches_ = run.timed("kernels", [&] {
    return plan_launches(fusion_, epilogues, device_, cache, fp32_, report_,
                         [&](ValueId node) { return pointer_for(*sets_[0], node); });
  });
  std::size_t attention_workspace = 0;
  for (const GpuLaunchStep& launch : launches_)
    if (launch.cudnn) attention_workspace = std::max(attention_workspace, launch.cudnn->workspace);
  if (attention_workspace) attention_workspace_ = DeviceBuffer(attention_workspace);
  run.dump("launch-plan", [&] { return print_launch_plan(epilogues, launches_); });
  run.dump("kernels", [&] { return report_.print(fusion_); });
  run.timed("bind", [&] { bind(*sets_[0]); });
  const GpuRates rates = gpu_rates(device_.info());
  std::vector<KernelWork> work = run.timed("plan", [&] {
    kernel_infos_ = describe_kernels(fusion_);
    return predict_plan(fusion_, launches_, kernel_infos_, rates);
  });
  run.dump("plan", [&] { return print_predictions(work, rates); });
  report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void GpuExecutable::allocate_buffers() {
  const Graph& g = *graph_;
  arena_ = DeviceBuffer(static_cast<std::size_t>(std::max<int64_t>(memory_.arena_bytes(), 0)));
  pointer_.assign(g.size(), 0);
  input_index_.assign(g.size(), -1);
  for (const BufferSlot& slot : memory_.slots())
    pointer_[slot.node] = arena_.get() + static_cast<cuda::DevicePtr>(slot.offset);
  for (std::size_t i = 0; i < g.inputs().size(); ++i)
    input_index_[g.inputs()[i].id] = static_cast<int>(i);
  // An output stored over a donated input lives in that input's buffer, in either set.
  const std::vector<ValueId> storage = storage_over_inputs(fusion_);
  for (ValueId v = 0; v < storage.size(); ++v)
    if (storage[v] != v) input_index_[v] = input_index_[storage[v]];
  // Kernel roots that are outputs get their own buffers (graph inputs are in the sets), in one
  // allocation: the driver rounds each allocation up to whole pages (device_page_bytes).
  std::vector<ValueId> owned;
  std::vector<std::size_t> owned_bytes;
  for (const NamedValue& out : g.outputs())
    if (!pointer_[out.id] && input_index_[out.id] < 0 &&
        std::find(owned.begin(), owned.end(), out.id) == owned.end()) {
      owned.push_back(out.id);
      owned_bytes.push_back(byte_size(g.type(out.id)));
    }
  owned_outputs_ = allocate_packed(owned_bytes);
  for (std::size_t i = 0; i < owned.size(); ++i)
    pointer_[owned[i]] = owned_outputs_[i].get();
  input_carried_.assign(g.inputs().size(), false);
  input_resident_.assign(g.inputs().size(), false);
  output_carried_.assign(g.outputs().size(), false);
  for (auto& set : sets_) {
    set = std::make_unique<InputSet>();
    set->inputs.resize(g.inputs().size());
    set->events = std::make_shared<SetEvents>(device_.driver());
  }
  // The first set's buffers now (the launch plan reads their addresses); the second set's
  // when it first runs, once carried and resident inputs share the first set's instead.
  std::vector<std::size_t> input_bytes;
  for (const NamedValue& in : g.inputs())
    input_bytes.push_back(byte_size(g.type(in.id)));
  sets_[0]->inputs = allocate_packed(input_bytes);
  layout_staging();
}

void GpuExecutable::layout_staging() {
  const Graph& g = *graph_;
  input_offsets_.assign(g.inputs().size(), 0);
  output_offsets_.assign(g.outputs().size(), 0);
  staged_in_bytes_ = staged_out_bytes_ = 0;
  for (std::size_t i = 0; i < g.inputs().size(); ++i)
    if (!input_carried_[i] && !input_resident_[i]) {
      input_offsets_[i] = staged_in_bytes_;
      staged_in_bytes_ += aligned(byte_size(g.type(g.inputs()[i].id)));
    }
  for (std::size_t i = 0; i < g.outputs().size(); ++i)
    if (!output_carried_[i]) {
      output_offsets_[i] = staged_out_bytes_;
      staged_out_bytes_ += aligned(byte_size(g.type(g.outputs()[i].id)));
    }
  // The step's copies changed (carried values): graphs are captured again. The first set's
  // buffers and launches stay; the second set's buffers may now be shared, so it binds again.
  for (auto& set : sets_) {
    set->ready = false;
    set->staging_in = PinnedBuffer();
    set->staging_out = PinnedBuffer();
    drop_graph(*set);
    if (set != sets_[0]) set->bound.clear();
  }
}

void GpuExecutable::make_ready(InputSet& set) const {
  if (set.ready) return;
  const Graph& g = *graph_;
  std::vector<std::size_t> own, own_bytes; // the set's own buffers, in one allocation
  for (std::size_t i = 0; i < g.inputs().size(); ++i) {
    if (input_carried_[i] || input_resident_[i])
      set.inputs[i] = sets_[0]->inputs[i]; // one device copy, whichever set runs
    else if (!set.inputs[i]) {
      own.push_back(i);
      own_bytes.push_back(byte_size(g.type(g.inputs()[i].id)));
    }
  }
  std::vector<DeviceSpan> made = allocate_packed(own_bytes);
  for (std::size_t j = 0; j < own.size(); ++j)
    set.inputs[own[j]] = made[j];
  set.staging_in = PinnedBuffer(staged_in_bytes_);
  set.staging_out = PinnedBuffer(staged_out_bytes_);
  if (set.bound.empty()) bind(set); // the first set is bound by the `bind` stage
  set.ready = true;
}

GpuExecutable::~GpuExecutable() {
  // A destructor must not throw: with the driver gone (process exit) there is nothing to
  // release; an error from the last step is reported, not thrown.
  const cuda::Driver& d = device_.driver();
  if (!device_.try_make_current()) return;
  for (cuda::EventHandle e : marks_)
    if (e) d.cuEventDestroy(e);
  for (auto& set : sets_) {
    if (!set) continue;
    try {
      settle(*set); // outputs handed out stay readable without the pinned staging
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sinter: %s (while releasing a compiled CUDA step)\n", e.what());
    }
    if (set->exec) d.cuGraphExecDestroy(set->exec);
    if (set->graph) d.cuGraphDestroy(set->graph);
  }
}

std::optional<ValueId> GpuExecutable::value_over_input(std::size_t input) const {
  for (const Kernel& kernel : fusion_.kernels)
    for (auto [out, in] : kernel.over_inputs)
      if (in == graph_->inputs()[input].id) return out;
  return std::nullopt;
}

cuda::DevicePtr GpuExecutable::pointer_for(const InputSet& set, ValueId node) const {
  int input = input_index_[node];
  return input >= 0 ? set.inputs[static_cast<std::size_t>(input)].get() : pointer_[node];
}

void GpuExecutable::bind(InputSet& set) const {
  set.bound.clear();
  for (const GpuLaunchStep& launch : launches_) {
    Bound b;
    if (launch.kind == KernelKind::collective) {
      b.a = pointer_for(set, launch.a);
      b.c = pointer_for(set, launch.c);
    } else if (launch.kind == KernelKind::gemm) {
      b.gemm = launch.gemm;
      if (launch.bias_node) b.gemm.bias = pointer_for(set, *launch.bias_node);
      if (launch.aux_node) b.gemm.aux = pointer_for(set, *launch.aux_node);
      b.a = pointer_for(set, launch.a);
      b.b = pointer_for(set, launch.b);
      b.c = pointer_for(set, launch.c);
      kernels::CublasLt::get()->prepare(b.gemm); // never during graph capture
    } else if (launch.cudnn) {
      using Role = CudnnAttentionStep::Role;
      auto at = [&](Role role) {
        const std::optional<ValueId>& node = launch.cudnn->nodes[role];
        if (!node) return cuda::DevicePtr{0};
        return pointer_for(set, *node) + static_cast<cuda::DevicePtr>(launch.cudnn->offsets[role]) *
                                             dtype_bytes(graph_->type(*node).dtype);
      };
      b.attention = {
          at(Role::q),   at(Role::k),  at(Role::v),  at(Role::o),  at(Role::lse),
          at(Role::d_o), at(Role::dq), at(Role::dk), at(Role::dv), attention_workspace_.get()};
    } else {
      for (ValueId node : launch.argument_nodes)
        b.arguments.push_back(pointer_for(set, node));
      b.rows = launch.rows.value_or(0);
    }
    set.bound.push_back(std::move(b));
  }
  // Parameters point into each bound launch's own arguments, now that none will move.
  for (std::size_t i = 0; i < set.bound.size(); ++i) {
    Bound& b = set.bound[i];
    for (cuda::DevicePtr& argument : b.arguments)
      b.parameters.push_back(&argument);
    if (launches_[i].rows) b.parameters.push_back(&b.rows);
  }
  drop_graph(set);
}

void GpuExecutable::drop_graph(InputSet& set) const {
  const cuda::Driver& d = device_.driver();
  if (set.exec) d.cuGraphExecDestroy(set.exec);
  if (set.graph) d.cuGraphDestroy(set.graph);
  set.exec = nullptr;
  set.graph = nullptr;
}

void GpuExecutable::enqueue_body(const InputSet& set, std::span<const cuda::EventHandle> marks,
                                 GpuNumericsCheck* numerics) const {
  const cuda::Driver& d = device_.driver();
  cuda::StreamHandle stream = device_.stream();
  const Graph& g = *graph_;
  // Launch i runs the plan's kernels from its own to the next launch's (an absorbed epilogue).
  auto check = [&](std::size_t i) {
    std::size_t last = i + 1 < launches_.size() ? launches_[i + 1].kernel : fusion_.kernels.size();
    numerics->after_launch(fusion_, launches_[i].kernel, last,
                           [&](ValueId v) { return pointer_for(set, v); });
  };
  for (std::size_t i = 0; i < launches_.size(); ++i) {
    if (numerics && i > 0) check(i - 1);
    const GpuLaunchStep& launch = launches_[i];
    const Bound& b = set.bound[i];
    if (!marks.empty()) d.check(d.cuEventRecord(marks[i], stream), "cuEventRecord");
    if (launch.kind == KernelKind::gemm) {
      kernels::CublasLt::get()->matmul(b.gemm, b.a, b.b, b.c, device_.gemm_workspace(), stream);
      continue;
    }
    if (launch.cudnn) {
      kernels::CudnnAttention::get()->run(launch.cudnn->shape, b.attention, stream);
      continue;
    }
    if (launch.kind == KernelKind::collective) {
      const Node& n = g.node(launch.c);
      if (!nccl_) { // a world of one without NCCL: the result is the operand
        if (b.a != b.c)
          d.check(d.cuMemcpyDtoDAsync(b.c, b.a, byte_size(n.type), stream), "cuMemcpyDtoDAsync");
        continue;
      }
      int64_t count = numel(n.type.shape);
      switch (n.op) {
      case OpId::all_reduce: nccl_->all_reduce(b.a, b.c, count, n.type.dtype, stream); break;
      case OpId::reduce_scatter:
        nccl_->reduce_scatter(b.a, b.c, count, n.type.dtype, stream);
        break;
      case OpId::all_gather:
        nccl_->all_gather(b.a, b.c, numel(g.type(n.inputs[0]).shape), n.type.dtype, stream);
        break;
      default:
        nccl_->broadcast(b.a, b.c, count, n.type.dtype, static_cast<int>(n.attrs.ints[1]), stream);
        break;
      }
      continue;
    }
    if (launch.shape.items == 0) continue;
    if (launch.clear_bytes)
      d.check(d.cuMemsetD8Async(b.arguments[0], 0, launch.clear_bytes, stream), "cuMemsetD8Async");
    d.check(d.cuLaunchKernel(launch.function, static_cast<unsigned>(launch.shape.blocks), 1, 1,
                             static_cast<unsigned>(launch.shape.threads), 1, 1,
                             static_cast<unsigned>(launch.shape.shared_bytes), stream,
                             const_cast<void**>(b.parameters.data()), nullptr),
            "cuLaunchKernel");
  }
  if (numerics && !launches_.empty()) check(launches_.size() - 1);
  if (!marks.empty()) d.check(d.cuEventRecord(marks[launches_.size()], stream), "cuEventRecord");
  // Carried outputs become the next run's inputs on the device; the rest go to pinned memory.
  for (const Carried& c : carried_)
    if (c.bytes && !c.in_place)
      d.check(d.cuMemcpyDtoDAsync(c.buffer.get(), pointer_for(set, g.outputs()[c.output].id),
                                  c.bytes, stream),
              "cuMemcpyDtoDAsync");
  for (std::size_t i = 0; i < g.outputs().size(); ++i)
    if (std::size_t n = byte_size(g.type(g.outputs()[i].id)); n && !output_carried_[i])
      d.check(d.cuMemcpyDtoHAsync(set.staging_out.data() + output_offsets_[i],
                                  pointer_for(set, g.outputs()[i].id), n, stream),
              "cuMemcpyDtoHAsync");
}

void GpuExecutable::capture(InputSet& set) const {
  const cuda::Driver& d = device_.driver();
  cuda::StreamHandle stream = device_.stream();
  d.check(d.cuStreamBeginCapture(stream, cuda::stream_capture_thread_local),
          "cuStreamBeginCapture");
  try {
    enqueue_body(set);
  } catch (...) {
    cuda::GraphHandle discarded = nullptr;
    d.cuStreamEndCapture(stream, &discarded);
    if (discarded) d.cuGraphDestroy(discarded);
    throw;
  }
  d.check(d.cuStreamEndCapture(stream, &set.graph), "cuStreamEndCapture");
  d.check(d.cuGraphInstantiateWithFlags(&set.exec, set.graph, 0), "cuGraphInstantiateWithFlags");
}

void GpuExecutable::settle(InputSet& set) const {
  if (!set.in_flight) return;
  for (const auto& weak : set.staged)
    if (auto value = weak.lock()) value->preserve();
  set.staged.clear();
  const cuda::Driver& d = device_.driver();
  d.check(d.cuEventSynchronize(set.events->finished), "cuEventSynchronize (an earlier step)");
  set.in_flight = false;
}

void GpuExecutable::set_carried(
    std::span<const std::pair<std::size_t, std::size_t>> input_from_output) {
  std::lock_guard lock(run_mutex_);
  device_.make_current();
  const Graph& g = *graph_;
  for (auto& set : sets_)
    settle(*set);
  for (auto [in, out] : input_from_output) {
    if (in >= g.inputs().size() || out >= g.outputs().size() ||
        !(g.type(g.inputs()[in].id) == g.type(g.outputs()[out].id)) || input_carried_[in] ||
        output_carried_[out])
      throw std::invalid_argument("sinter: carried pair (input " + std::to_string(in) +
                                  ", output " + std::to_string(out) +
                                  ") does not name an input and an output of one type, each "
                                  "carried once");
    if (std::optional<ValueId> over = value_over_input(in); over && *over != g.outputs()[out].id)
      throw std::invalid_argument("sinter: input '" + g.inputs()[in].name +
                                  "' is carried from output '" + g.outputs()[out].name +
                                  "', but the step stores another value over it (the output it "
                                  "is donated to): carry it from that output");
    Carried c;
    c.input = in;
    c.output = out;
    c.runs = std::make_shared<std::atomic<uint64_t>>(0);
    c.bytes = byte_size(g.type(g.inputs()[in].id));
    carried_.push_back(std::move(c));
    input_carried_[in] = true;
    output_carried_[out] = true;
  }
  if (!ran_ && !input_from_output.empty()) separate_carried_inputs();
  for (Carried& c : carried_) {
    c.buffer = sets_[0]->inputs[c.input];
    sets_[1]->inputs[c.input] = c.buffer; // one device copy, whichever set runs
    c.in_place = pointer_for(*sets_[0], g.outputs()[c.output].id) == c.buffer.get();
  }
  layout_staging();
  runs_ = 0;
}

void GpuExecutable::separate_carried_inputs() {
  // Released first, then made again, so that no moment holds both layouts (nothing has run:
  // the buffers hold no values yet).
  const Graph& g = *graph_;
  for (auto& set : sets_)
    std::fill(set->inputs.begin(), set->inputs.end(), DeviceSpan{});
  std::vector<std::size_t> carried, others, carried_bytes, others_bytes;
  for (std::size_t i = 0; i < g.inputs().size(); ++i) {
    (input_carried_[i] ? carried : others).push_back(i);
    (input_carried_[i] ? carried_bytes : others_bytes)
        .push_back(byte_size(g.type(g.inputs()[i].id)));
  }
  std::vector<DeviceSpan> made = allocate_packed(carried_bytes);
  for (std::size_t j = 0; j < carried.size(); ++j)
    sets_[0]->inputs[carried[j]] = made[j];
  made = allocate_packed(others_bytes);
  for (std::size_t j = 0; j < others.size(); ++j)
    sets_[0]->inputs[others[j]] = made[j];
  for (std::size_t i = 0; i < g.inputs().size(); ++i)
    if (input_resident_[i]) sets_[1]->inputs[i] = sets_[0]->inputs[i];
  sets_[0]->bound.clear(); // bound again by make_ready, to the new addresses
}

void GpuExecutable::set_resident(std::span<const std::size_t> inputs) {
  std::lock_guard lock(run_mutex_);
  device_.make_current();
  const Graph& g = *graph_;
  for (auto& set : sets_)
    settle(*set);
  for (std::size_t in : inputs) {
    if (in >= g.inputs().size() || input_carried_[in] || input_resident_[in])
      throw std::invalid_argument("sinter: resident input " + std::to_string(in) +
                                  " is not an input of the step, or is carried or resident "
                                  "already");
    if (std::optional<ValueId> over = value_over_input(in))
      throw std::invalid_argument("sinter: input '" + g.inputs()[in].name +
                                  "' cannot be resident: the step stores a value over it (it "
                                  "is donated to an output); carry it instead (set_carried)");
    sets_[1]->inputs[in] = sets_[0]->inputs[in]; // one device copy, whichever set runs
    resident_.emplace_back(in, 0);
    input_resident_[in] = true;
  }
  layout_staging();
  runs_ = 0;
}

double GpuExecutable::last_step_device_ms() const {
  std::lock_guard lock(run_mutex_);
  if (last_set_ < 0) return 0;
  const InputSet& set = *sets_[static_cast<std::size_t>(last_set_)];
  const cuda::Driver& d = device_.driver();
  device_.make_current();
  d.check(d.cuEventSynchronize(set.events->finished), "cuEventSynchronize");
  float ms = 0;
  d.check(d.cuEventElapsedTime(&ms, set.events->started, set.events->finished),
          "cuEventElapsedTime");
  return ms;
}

void GpuExecutable::report_kernel_times(profile::ProgramRun& run, int64_t enqueued) const {
  const cuda::Driver& d = device_.driver();
  const std::size_t n = launches_.size();
  d.check(d.cuEventSynchronize(marks_[n]), "cuEventSynchronize (a profiled step)");
  auto ns_between = [&](cuda::EventHandle from, cuda::EventHandle to) {
    float ms = 0;
    d.check(d.cuEventElapsedTime(&ms, from, to), "cuEventElapsedTime");
    return static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  };
  // The device's clock is not the host's: the kernels are placed from the moment the host
  // enqueued the first, one after another as the events spaced them.
  for (std::size_t i = 0; i < n; ++i) {
    // A GEMM that absorbed an epilogue reports as the GEMM; the absorbed kernel shows no time.
    int64_t begin = enqueued + ns_between(marks_[0], marks_[i]);
    run.kernel(launches_[i].kernel, begin, begin + ns_between(marks_[i], marks_[i + 1]));
  }
}

void GpuExecutable::run_into(std::span<const HostTensor* const> inputs,
                             std::span<HostTensor> results) const {
  std::lock_guard lock(run_mutex_);
  device_.make_current();
  const Graph& g = *graph_;
  profile::ProgramRun profiled(
      profile_id_, label(), [&] { return kernel_infos_; },
      [&] { return measure_gpu_peak(device_, fp32_); });
  check_collective_ranks(collective_ranks_, communicator());
  // Collectives run through NCCL on the step's stream (in its CUDA graph): made before any
  // capture, by every rank (the id goes over the host communicator); one rank alone copies.
  if (!nccl_ && collective_ranks_ != 0 && (communicator().size() > 1 || kernels::Nccl::get()))
    nccl_ = std::make_unique<kernels::NcclCommunicator>(communicator());
  const cuda::Driver& d = device_.driver();
  cuda::StreamHandle compute = device_.stream(), copy = device_.copy_stream();
  int which = last_set_ == 0 ? 1 : 0;
  InputSet& set = *sets_[static_cast<std::size_t>(which)];
  // SINTER_TIME_PHASES=1: what the first run spends where (a warm first call's time besides
  // the compile), each part a `sinter: phase first run.<part> <ms> ms` line as it ends.
  std::optional<PhaseTimer> part;
  auto first_run_part = [&](std::string_view name) {
    part.reset();
    if (runs_ == 0 && PhaseTimer::enabled()) part.emplace("first run." + std::string(name));
  };
  first_run_part("buffers");
  // The run before last used this set: once it is done, its buffers and staging are free.
  settle(set);
  // Both sets are made by the first run (carried and resident inputs are known by then), so
  // everything a step allocates is allocated there, where running out of memory is explained.
  for (auto& each : sets_)
    make_ready(*each);
  // A profiled run launches kernel by kernel between events (not the CUDA graph) and waits
  // for them: the time of each kernel, at the cost of the overlap between steps.
  if (profiled && marks_.empty()) {
    marks_.assign(launches_.size() + 2, nullptr);
    for (cuda::EventHandle& e : marks_)
      d.check(d.cuEventCreate(&e, 0), "cuEventCreate");
  }
  if (profiled) {
    profiled.on_track("cuda stream");
    d.check(d.cuEventRecord(marks_.back(), copy), "cuEventRecord");
  }
  auto stage = [&](std::size_t i) {
    std::byte* to = set.staging_in.data() + input_offsets_[i];
    std::span<const std::byte> from = inputs[i]->bytes();
    constexpr std::size_t slice = std::size_t{4} << 20; // per thread at a time
    if (!staging_pool_ || from.size() < 2 * slice) {
      std::memcpy(to, from.data(), from.size());
      return;
    }
    const auto slices = static_cast<int64_t>((from.size() + slice - 1) / slice);
    staging_pool_->parallel_for(slices, 1, [&](int64_t begin, int64_t end) {
      std::size_t first = static_cast<std::size_t>(begin) * slice;
      std::size_t last = std::min(from.size(), static_cast<std::size_t>(end) * slice);
      std::memcpy(to + first, from.data() + first, last - first);
    });
  };
  // Batch inputs go up on the copy stream, overlapping the step still running.
  first_run_part("batch");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::size_t n = byte_size(g.type(g.inputs()[i].id));
    if (input_carried_[i] || input_resident_[i] || n == 0) continue;
    stage(i);
    d.check(d.cuMemcpyHtoDAsync(set.inputs[i].get(), set.staging_in.data() + input_offsets_[i], n,
                                copy),
            "cuMemcpyHtoDAsync");
  }
  d.check(d.cuEventRecord(set.events->uploaded, copy), "cuEventRecord");
  d.check(d.cuStreamWaitEvent(compute, set.events->uploaded, 0), "cuStreamWaitEvent");
  // Carried inputs the host changed go up in step order: the previous step still reads them.
  // They are the parameters and optimizer state, uploaded once (or after a host write):
  // straight from the tensor, which the driver copies before returning (pageable memory), so
  // no pinned mirror of them is ever held. A tensor nobody wrote since it was made (fresh
  // optimizer moments: two thirds of an AdamW run's state) is cleared on the device instead:
  // GPT-2 small's first step copied 1.3 GB of zeros at pageable speed.
  auto upload = [&](cuda::DevicePtr to, const HostTensor& from, std::size_t n) {
    if (from.known_zero())
      d.check(d.cuMemsetD8Async(to, 0, n, compute), "cuMemsetD8Async");
    else
      d.check(d.cuMemcpyHtoDAsync(to, from.bytes().data(), n, compute), "cuMemcpyHtoDAsync");
  };
  first_run_part("parameters");
  for (const Carried& c : carried_) {
    const DeferredBytes* source = inputs[c.input]->unwritten_source();
    if ((source && source == c.latest.get()) || c.bytes == 0) continue;
    upload(c.buffer.get(), *inputs[c.input], c.bytes);
  }
  // Resident inputs go up only when the host value changed, in step order like carried ones.
  for (auto& [in, uploaded] : resident_) {
    std::size_t n = byte_size(g.type(g.inputs()[in].id));
    if (n == 0 || inputs[in]->stamp() == uploaded) continue;
    upload(set.inputs[in].get(), *inputs[in], n);
    uploaded = inputs[in]->stamp();
  }
  d.check(d.cuEventRecord(set.events->started, compute), "cuEventRecord");
  // --check-numerics runs launch by launch too, each checked before the next (gpu_numerics).
  const bool checked = check_numerics_enabled();
  if (checked && !numerics_) numerics_ = std::make_unique<GpuNumericsCheck>(device_);
  bool direct = runs_ < direct_runs_before_graph || !graphs_enabled() || profiled || checked;
  first_run_part("launches");
  if (!direct && !set.exec) capture(set);
  const int64_t enqueued = profile::now_ns();
  if (direct)
    enqueue_body(set,
                 profiled ? std::span<const cuda::EventHandle>(marks_.data(), launches_.size() + 1)
                          : std::span<const cuda::EventHandle>(),
                 checked ? numerics_.get() : nullptr);
  else
    d.check(d.cuGraphLaunch(set.exec, compute), "cuGraphLaunch");
  d.check(d.cuEventRecord(set.events->finished, compute), "cuEventRecord");
  if (profiled) {
    report_kernel_times(profiled, enqueued);
    float upload_ms = 0;
    d.check(d.cuEventElapsedTime(&upload_ms, marks_.back(), set.events->uploaded),
            "cuEventElapsedTime");
    profiled.copies(0, static_cast<int64_t>(static_cast<double>(upload_ms) * 1e6));
  }
  set.in_flight = true;
  last_set_ = which;
  last_run_was_graph_ = !direct;
  ran_ = true;
  first_run_part("wait");
  if (runs_++ < direct_runs_before_graph)
    d.check(d.cuEventSynchronize(set.events->finished), "running the step");
  part.reset();

  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    const TensorType& t = g.type(g.outputs()[i].id);
    // (byte_size: what an output tensor held before is overwritten, never fetched.)
    if (results[i].dtype() != t.dtype || results[i].shape() != t.shape ||
        results[i].byte_size() != byte_size(t))
      results[i] = HostTensor(t.dtype, t.shape);
    if (output_carried_[i]) continue;
    auto value = std::make_shared<const StagedValue>(
        device_, set.events, set.staging_out.data() + output_offsets_[i], byte_size(t));
    set.staged.push_back(value);
    results[i].defer(value);
  }
  for (Carried& c : carried_) {
    c.runs->fetch_add(1); // values handed out by earlier runs are no longer on the device
    c.latest = std::make_shared<ResidentValue>(device_, set.events, c.buffer, c.runs, c.bytes);
    results[c.output].defer(c.latest);
  }
}

} // namespace sinter
