// jit/backend/cuda/attention_choice.cpp — cuDNN or NVPTX attention per shape: the cuDNN form of a
// kernel, one timed and compared run of both, the decision's log line and cache entry
#include "jit/backend/cuda/attention_choice.hpp"
#include "jit/api.hpp"
#include "jit/backend/attention_layout.hpp"
#include "jit/backend/backends.hpp"
#include "jit/runtime/host_tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>

namespace sinter {
namespace {

using Role = CudnnAttentionStep::Role;

/// The operands' leading dims as cuDNN's [b, h]: the last batch dim is h, the others b.
std::pair<int64_t, int64_t> batch_and_heads(const Shape& batch_dims) {
  if (batch_dims.empty()) return {1, 1};
  int64_t b = 1;
  for (std::size_t i = 0; i + 1 < batch_dims.size(); ++i)
    b *= batch_dims[i];
  return {b, batch_dims.back()};
}

std::string format_ms(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f ms", ms);
  return text;
}

/// The decision for one shape, as the cache stores it: "cudnn 0.061 0.352" (path, then the
/// cuDNN and NVPTX times in ms; 0 where not timed).
struct Decision {
  bool cudnn = false;
  double cudnn_ms = 0, nvptx_ms = 0;
  std::string why;        ///< the NVPTX kernel was kept because of it (empty when timed)
  bool from_disk = false; ///< read from the kernel cache (timed by an earlier process)
};

/// Device buffers of the nodes the roles read or write, one per node (q, k and v may be views
/// of one packed buffer), filled or compared on the host: of every role the step binds, or of
/// its outputs alone (`outputs_only`: the second path's results).
class Operands {
public:
  Operands(CudaDevice& device, const Graph& g, const CudnnAttentionStep& step, bool outputs_only)
      : device_(device), step_(step) {
    const bool backward = step.shape.backward;
    for (int role = 0; role < CudnnAttentionStep::roles; ++role) {
      bool output = backward ? role >= Role::dq : role == Role::o || role == Role::lse;
      held_[role] = step.nodes[role].has_value() && (output || !outputs_only);
      if (held_[role] && !buffers_.count(*step.nodes[role])) {
        const TensorType& t = g.type(*step.nodes[role]);
        types_[*step.nodes[role]] = t;
        buffers_.emplace(*step.nodes[role], DeviceBuffer(std::max<std::size_t>(byte_size(t), 16)));
      }
    }
  }
  /// The role's node's buffer.
  cuda::DevicePtr base(int role) const { return buffers_.at(*step_.nodes[role]).get(); }
  /// The role's first element.
  cuda::DevicePtr at(int role) const {
    if (!has(role)) return 0;
    return base(role) + static_cast<cuda::DevicePtr>(step_.offsets[role]) *
                            dtype_bytes(types_.at(*step_.nodes[role]).dtype);
  }
  bool has(int role) const { return held_[role]; }
  void fill_random(int role, uint64_t seed) {
    const TensorType& t = types_.at(*step_.nodes[role]);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    std::vector<double> values(static_cast<std::size_t>(numel(t.shape)));
    for (double& x : values)
      x = uniform(rng);
    HostTensor host = HostTensor::from_doubles(t.dtype, t.shape, values);
    const cuda::Driver& d = device_.driver();
    d.check(
        d.cuMemcpyHtoDAsync(base(role), host.bytes().data(), host.byte_size(), device_.stream()),
        "cuMemcpyHtoDAsync");
    d.check(d.cuStreamSynchronize(device_.stream()), "cuStreamSynchronize");
  }
  /// What an output role holds (its own buffer, from the start).
  std::vector<double> download(int role) const {
    const TensorType& t = types_.at(*step_.nodes[role]);
    HostTensor host(t.dtype, t.shape);
    const cuda::Driver& d = device_.driver();
    d.check(d.cuStreamSynchronize(device_.stream()), "cuStreamSynchronize");
    d.check(d.cuMemcpyDtoH(host.bytes().data(), base(role), host.byte_size()), "cuMemcpyDtoH");
    return host.to_doubles();
  }

private:
  CudaDevice& device_;
  const CudnnAttentionStep& step_;
  std::map<ValueId, TensorType> types_;
  std::map<ValueId, DeviceBuffer> buffers_;
  std::array<bool, CudnnAttentionStep::roles> held_{};
};

/// The largest difference between two outputs relative to the larger of 1 and the reference's
/// largest magnitude; infinity when either holds a NaN or an infinity.
double relative_difference(const std::vector<double>& got, const std::vector<double>& want) {
  double largest = 1.0, difference = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i]))
      return std::numeric_limits<double>::infinity();
    largest = std::max(largest, std::abs(want[i]));
    difference = std::max(difference, std::abs(got[i] - want[i]));
  }
  return difference / largest;
}

/// Both paths once on random operands: times (best of 5 after a warm-up) and agreement.
Decision measure(const Graph& g, const CudnnAttentionStep& step,
                 cuda::FunctionHandle nvptx_function, const GpuLaunch& nvptx_launch,
                 std::span<const ValueId> argument_nodes, CudaDevice& device) {
  kernels::CudnnAttention& cudnn = *kernels::CudnnAttention::get();
  const cuda::Driver& d = device.driver();
  cuda::StreamHandle stream = device.stream();
  Operands mine(device, g, step, false), theirs(device, g, step, true);
  const bool backward = step.shape.backward;
  uint64_t seed = 1;
  for (Role role : {Role::q, Role::k, Role::v, Role::d_o})
    if (mine.has(role)) mine.fill_random(role, seed++);
  DeviceBuffer workspace(std::max<std::size_t>(step.workspace, 256));
  auto buffers_of = [&](const Operands& out) {
    kernels::CudnnAttentionBuffers b;
    b.q = mine.at(Role::q), b.k = mine.at(Role::k), b.v = mine.at(Role::v);
    b.o = backward ? mine.at(Role::o) : out.at(Role::o);
    b.lse = backward ? mine.at(Role::lse) : out.at(Role::lse);
    b.d_o = mine.at(Role::d_o);
    b.dq = out.at(Role::dq), b.dk = out.at(Role::dk), b.dv = out.at(Role::dv);
    b.workspace = workspace.get();
    return b;
  };
  if (backward) { // a real o and log-sum-exp for the gradients, from cuDNN's forward
    kernels::CudnnAttentionShape forward = step.shape;
    forward.backward = false;
    forward.saves_lse = true;
    DeviceBuffer forward_workspace(std::max<std::size_t>(cudnn.workspace_bytes(forward), 256));
    kernels::CudnnAttentionBuffers b = buffers_of(mine);
    b.workspace = forward_workspace.get();
    cudnn.run(forward, b, stream);
    d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  }
  // The NVPTX kernel's arguments: its outputs into `mine`, then its reads.
  std::map<ValueId, cuda::DevicePtr> pointer_of;
  for (int role = 0; role < CudnnAttentionStep::roles; ++role)
    if (step.nodes[role]) pointer_of[*step.nodes[role]] = mine.base(role);
  std::vector<cuda::DevicePtr> arguments;
  for (ValueId node : argument_nodes)
    arguments.push_back(pointer_of.at(node));
  std::vector<void*> parameters;
  for (cuda::DevicePtr& argument : arguments)
    parameters.push_back(&argument);
  auto run_nvptx = [&] {
    if (nvptx_launch.zero_output_first)
      d.check(d.cuMemsetD8Async(arguments[0], 0, byte_size(g.type(argument_nodes[0])), stream),
              "cuMemsetD8Async");
    d.check(d.cuLaunchKernel(nvptx_function, static_cast<unsigned>(nvptx_launch.blocks), 1, 1,
                             static_cast<unsigned>(nvptx_launch.threads), 1, 1, 0, stream,
                             parameters.data(), nullptr),
            "cuLaunchKernel");
  };
  kernels::CudnnAttentionBuffers cudnn_buffers = buffers_of(theirs);
  auto run_cudnn = [&] { cudnn.run(step.shape, cudnn_buffers, stream); };

  cuda::StreamTimer timer(d, stream);
  Decision decision;
  try {
    run_nvptx();
    run_cudnn();
    decision.nvptx_ms = decision.cudnn_ms = std::numeric_limits<double>::infinity();
    for (int round = 0; round < 5; ++round) { // interleaved, so clocks treat both alike
      decision.nvptx_ms = std::min(decision.nvptx_ms, timer.milliseconds(run_nvptx));
      decision.cudnn_ms = std::min(decision.cudnn_ms, timer.milliseconds(run_cudnn));
    }
    const std::vector<Role> outputs = backward ? std::vector<Role>{Role::dq, Role::dk, Role::dv}
                                               : std::vector<Role>{Role::o, Role::lse};
    for (Role role : outputs) {
      if (!mine.has(role)) continue;
      double difference = relative_difference(theirs.download(role), mine.download(role));
      if (difference > 0.02) { // bf16's rounding of sums over a thousand keys stays well below
        decision.why = "cuDNN's result differs from the NVPTX kernel's by " +
                       std::to_string(difference) + " of its largest magnitude";
        break;
      }
    }
  } catch (const std::exception& e) {
    decision.why = e.what();
  }
  decision.cudnn = decision.why.empty() && decision.cudnn_ms < decision.nvptx_ms;
  return decision;
}

CacheKey decision_key(const CudnnAttentionStep& step, CudaDevice& device, std::size_t version) {
  KeyHasher h;
  h.add(std::string_view("attention-choice-v2"));
  h.add(std::string_view(device.info().name));
  h.add(static_cast<uint64_t>(version));
  h.add(std::string_view(step.shape.describe()));
  h.add_double(step.shape.scale);
  h.add(static_cast<uint64_t>(step.shape.saves_lse));
  for (const auto& strides : step.shape.all_strides())
    for (int64_t stride : strides)
      h.add(static_cast<uint64_t>(stride));
  h.add(std::string_view(device.target().fingerprint()));
  return h.finish();
}

} // namespace

namespace {

/// cuDNN's b, h and row strides of a strided operand over `batch_dims` (b the product of all
/// but the last), or nullopt where the leading dims do not merge into one stride.
std::optional<kernels::CudnnAttentionShape::Strides> cudnn_strides(const AttentionOperand& o,
                                                                   const Shape& batch_dims) {
  if (o.contiguous) return kernels::CudnnAttentionShape::Strides{};
  if (batch_dims.empty()) return kernels::CudnnAttentionShape::Strides{0, 0, o.row_stride};
  std::size_t last = batch_dims.size() - 1;
  for (std::size_t i = 0; i + 1 < last; ++i)
    if (batch_dims[i + 1] != 1 && o.batch_stride[i] != o.batch_stride[i + 1] * batch_dims[i + 1])
      return std::nullopt;
  int64_t b_stride = last > 0 ? o.batch_stride[last - 1] : o.batch_stride[0] * batch_dims[0];
  return kernels::CudnnAttentionShape::Strides{b_stride, o.batch_stride[last], o.row_stride};
}

} // namespace

std::variant<CudnnAttentionStep, std::string>
cudnn_attention_step(const FusionPlan& plan, const Kernel& kernel, int capability) {
  const Graph& g = *plan.graph;
  const Node& root = g.node(kernel.root);
  AttentionLayout l = attention_layout(plan, kernel);
  if (l.has_mask)
    return std::string("cuDNN's fused attention here takes causal or no masks, and this one has "
                       "a boolean mask");
  CudnnAttentionStep step;
  kernels::CudnnAttentionShape& s = step.shape;
  s.dtype = g.type(root.inputs[0]).dtype;
  std::tie(s.b, s.h) = batch_and_heads(l.batch_dims);
  s.tq = l.tq, s.tk = l.tk, s.d = l.d, s.dv = l.dv;
  s.scale = static_cast<float>(l.scale);
  s.causal = l.causal;
  s.backward = l.backward;
  std::vector<Role> read_roles{Role::q, Role::k, Role::v};
  if (l.backward) read_roles.insert(read_roles.end(), {Role::o, Role::lse, Role::d_o});
  for (std::size_t i = 0; i < read_roles.size(); ++i) {
    step.nodes[read_roles[i]] = l.operands[i].buffer;
    step.offsets[read_roles[i]] = l.operands[i].offset;
  }
  kernels::CudnnAttentionShape::Strides* strides[] = {&s.q_strides, &s.k_strides, &s.v_strides,
                                                      &s.o_strides, nullptr,      &s.do_strides};
  for (std::size_t i = 0; i < read_roles.size(); ++i) {
    std::optional<kernels::CudnnAttentionShape::Strides> given =
        cudnn_strides(l.operands[i], l.batch_dims);
    if (given && strides[i]) *strides[i] = *given;
    if (!given || (!strides[i] && !l.operands[i].contiguous))
      return std::string("cuDNN's fused attention here takes [b, h, t, d] operands, and operand ") +
             std::to_string(i) + " is a view whose batch dims do not merge into two";
  }
  // The results where the kernel writes them: token-major, or the parts of a packed gradient.
  struct Written {
    Role role;
    const AttentionOperand& place;
    kernels::CudnnAttentionShape::Strides* strides;
  };
  const Written written[] = {{Role::o, l.o_result, &s.o_strides},
                             {Role::dq, l.dq_result, &s.dq_strides},
                             {Role::dk, l.dk_result, &s.dk_strides},
                             {Role::dv, l.dv_result, &s.dv_strides}};
  for (const Written& w : written) {
    if (w.place.row_stride == 0) continue; // not a result this kernel writes
    std::optional<kernels::CudnnAttentionShape::Strides> given =
        cudnn_strides(w.place, l.batch_dims);
    if (!given)
      return std::string("cuDNN's fused attention here writes [b, h, t, d] results, and one is "
                         "laid out with batch dims that do not merge into two");
    *w.strides = *given;
    step.nodes[w.role] = w.place.buffer;
    step.offsets[w.role] = w.place.offset;
  }
  for (ValueId operand : {root.inputs[1], root.inputs[2]}) {
    const Shape& shape = g.type(operand).shape;
    if (shape.size() != l.batch_dims.size() + 2 ||
        !std::equal(l.batch_dims.begin(), l.batch_dims.end(), shape.begin()))
      return std::string("cuDNN's fused attention here takes k and v with q's batch dims");
  }
  for (ValueId out : kernel.outputs()) {
    const Node& n = g.node(out);
    if (n.op == OpId::fused_attention_lse)
      step.nodes[Role::lse] = out;
    else if (n.op != OpId::fused_attention && n.op != OpId::fused_attention_grad)
      return std::string("the kernel writes a value cuDNN's attention does not make");
  }
  if (l.backward && !(step.nodes[Role::dq] && step.nodes[Role::dk] && step.nodes[Role::dv]))
    return std::string("cuDNN's fused backward writes dq, dk and dv together, and this kernel "
                       "writes only some of them");
  if (!l.backward && !step.nodes[Role::o])
    return std::string("cuDNN's fused forward writes the attention's result, and this kernel "
                       "writes only its log-sum-exp");
  s.saves_lse = step.nodes[Role::lse].has_value();
  std::string why = kernels::cudnn_attention_unsupported(s, capability);
  if (!why.empty()) return why;
  return step;
}

std::size_t cudnn_attention_workspace_bound(const FusionPlan& fusion, int capability) {
  AttentionRequest request = attention_requested();
  if (request == AttentionRequest::nvptx || request == AttentionRequest::decomposed ||
      !kernels::CudnnAttention::get())
    return 0;
  std::size_t bound = 0;
  for (const Kernel& kernel : fusion.kernels) {
    if (kernel.kind != KernelKind::attention) continue;
    auto form = cudnn_attention_step(fusion, kernel, capability);
    if (auto* step = std::get_if<CudnnAttentionStep>(&form);
        step && !(step->shape.backward && gpu_deterministic()))
      bound = std::max(bound, kernels::cudnn_attention_buffer_bytes(step->shape));
  }
  return bound;
}

std::optional<CudnnAttentionStep> choose_attention(const FusionPlan& plan, const Kernel& kernel,
                                                   cuda::FunctionHandle nvptx_function,
                                                   const GpuLaunch& nvptx_launch,
                                                   std::span<const ValueId> argument_nodes,
                                                   CudaDevice& device, KernelCache& cache) {
  AttentionRequest request = attention_requested();
  if (request == AttentionRequest::nvptx || request == AttentionRequest::decomposed)
    return std::nullopt;
  const std::string on_cuda = " on cuda: ";
  const Graph& g = *plan.graph;
  auto form = cudnn_attention_step(plan, kernel, device.info().compute_capability);
  std::string prefix = "sinter: attention";
  if (auto* step = std::get_if<CudnnAttentionStep>(&form)) prefix += " " + step->shape.describe();
  static std::mutex said_mutex;
  static std::map<std::string, bool> said; // one line per decision and reason, per process
  auto say = [&](const std::string& line) {
    std::lock_guard lock(said_mutex);
    if (said.emplace(line, true).second) log_line(line);
  };
  auto keep_nvptx = [&](const std::string& why) -> std::optional<CudnnAttentionStep> {
    say(prefix + on_cuda + "nvptx (" + why + ")");
    return std::nullopt;
  };
  if (auto* why = std::get_if<std::string>(&form)) return keep_nvptx(*why);
  CudnnAttentionStep step = std::get<CudnnAttentionStep>(form);
  // cuDNN's backward may add its partial query gradients in another order on another run.
  if (step.shape.backward && gpu_deterministic()) {
    if (request == AttentionRequest::cudnn)
      throw std::invalid_argument(
          "sinter: SINTER_DETERMINISTIC=1 runs attention backwards on sinter's kernels, but "
          "SINTER_ATTENTION=cudnn asks for cuDNN's: unset one of the two");
    return keep_nvptx("SINTER_DETERMINISTIC=1");
  }
  kernels::CudnnAttention* cudnn = kernels::CudnnAttention::get();
  if (!cudnn) return keep_nvptx(kernels::CudnnAttention::unavailable_reason());
  // Plans cuDNN's graph (heuristics, engine finalization: the costly part) only when it runs.
  auto prepare = [&]() -> std::string {
    try {
      device.make_current();
      cudnn->prepare(step.shape);
      step.workspace = cudnn->workspace_bytes(step.shape);
      return {};
    } catch (const std::exception& e) {
      return e.what();
    }
  };
  if (request == AttentionRequest::cudnn) {
    if (std::string why = prepare(); !why.empty()) return keep_nvptx(why);
    say(prefix + on_cuda + "cudnn (SINTER_ATTENTION=cudnn)");
    return step;
  }
  if (nvptx_launch.items == 0) return keep_nvptx("no work");
  CacheKey key = decision_key(step, device, cudnn->version());
  Decision decision;
  bool cached = false;
  // This process's decisions first (a step's layers share shapes), then the disk's.
  static std::mutex decided_mutex;
  static std::map<std::pair<uint64_t, uint64_t>, Decision> decided;
  {
    std::lock_guard lock(decided_mutex);
    auto found = decided.find({key.hi, key.lo});
    if (found != decided.end()) {
      decision = found->second;
      cached = true;
    }
  }
  std::optional<std::vector<char>> entry;
  if (!cached) entry = cache.load(key);
  if (entry) {
    std::string text(entry->begin(), entry->end());
    char path[16] = {};
    if (std::sscanf(text.c_str(), "%15s %lf %lf", path, &decision.cudnn_ms, &decision.nvptx_ms) ==
        3) {
      decision.cudnn = std::string_view(path) == "cudnn";
      decision.from_disk = true;
      cached = true;
    }
  }
  if (!cached || decision.cudnn) {
    if (std::string why = prepare(); !why.empty()) return keep_nvptx(why);
  }
  if (!cached) {
    try {
      decision = measure(g, step, nvptx_function, nvptx_launch, argument_nodes, device);
    } catch (const std::exception& e) { // e.g. no memory for the trial's operands
      decision.why = e.what();
    }
    if (!decision.why.empty()) return keep_nvptx(decision.why); // not cached: retried next time
    std::string text = std::string(decision.cudnn ? "cudnn" : "nvptx") + " " +
                       std::to_string(decision.cudnn_ms) + " " + std::to_string(decision.nvptx_ms);
    cache.store(key, std::span<const char>(text.data(), text.size()));
  }
  {
    std::lock_guard lock(decided_mutex);
    decided.emplace(std::make_pair(key.hi, key.lo), decision);
  }
  std::string times =
      decision.cudnn ? format_ms(decision.cudnn_ms) + "; nvptx " + format_ms(decision.nvptx_ms)
                     : format_ms(decision.nvptx_ms) + "; cudnn " + format_ms(decision.cudnn_ms);
  say(prefix + on_cuda + (decision.cudnn ? "cudnn (" : "nvptx (") + times +
      (decision.from_disk ? ", timed at an earlier compile)" : ")"));
  if (!decision.cudnn) return std::nullopt;
  return step;
}

} // namespace sinter
