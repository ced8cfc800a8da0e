// jit/profile/numerics_check.cpp — scanning kernel outputs for inf/NaN and replaying the kernel
// in the reference interpreter to find the op that made it
#include "jit/profile/numerics_check.hpp"
#include "jit/settings.hpp"

#include "jit/api.hpp"
#include "jit/interp/interpreter.hpp"
#include "jit/profile/kernel_costs.hpp"
#include "jit/runtime/host_tensor.hpp"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string_view>

namespace sinter {
namespace {

std::atomic<int> g_check{-1}; // -1: not decided yet (read the environment)

/// The first element of `bytes` (of `dtype`) that is inf or NaN: its index, or -1.
int64_t first_non_finite(DType dtype, const void* bytes, int64_t count) {
  switch (dtype) {
  case DType::f32: {
    const auto* v = static_cast<const float*>(bytes);
    for (int64_t i = 0; i < count; ++i)
      if (!std::isfinite(v[i])) return i;
    return -1;
  }
  case DType::f64: {
    const auto* v = static_cast<const double*>(bytes);
    for (int64_t i = 0; i < count; ++i)
      if (!std::isfinite(v[i])) return i;
    return -1;
  }
  case DType::bf16:
  case DType::f16: {
    const uint16_t exponent = dtype == DType::bf16 ? 0x7F80 : 0x7C00;
    const auto* v = static_cast<const uint16_t*>(bytes);
    for (int64_t i = 0; i < count; ++i)
      if ((v[i] & exponent) == exponent) return i;
    return -1;
  }
  default: return -1;
  }
}

/// The largest finite value of a floating-point dtype (a float64 result beyond it overflows).
double largest(DType dtype) {
  switch (dtype) {
  case DType::f32: return std::numeric_limits<float>::max();
  case DType::bf16: return 3.3895313892515355e38;
  case DType::f16: return 65504.0;
  default: return std::numeric_limits<double>::max();
  }
}

/// "inf", "-inf" or "nan" for what a value became in its dtype.
const char* describe(double v) {
  if (std::isnan(v)) return "nan";
  return v > 0 ? "inf" : "-inf";
}

HostTensor from_bytes(const TensorType& type, const void* bytes) {
  HostTensor t(type.dtype, type.shape);
  std::memcpy(t.bytes().data(), bytes, t.bytes().size());
  return t;
}

std::string value_name(const Graph& g, ValueId id) {
  for (const NamedValue& in : g.inputs())
    if (in.id == id) return "input '" + in.name + "'";
  const std::string& path = g.scope_path(g.node(id).scope);
  return "`" + std::string(op_name(g.node(id).op)) + "`" + (path.empty() ? "" : " at " + path);
}

} // namespace

bool check_numerics_enabled() {
  int on = g_check.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* v = setting("SINTER_CHECK_NUMERICS");
    on = v && std::string_view(v) == "1";
    g_check.store(on, std::memory_order_relaxed);
  }
  return on != 0;
}

void set_check_numerics(bool on) { g_check.store(on ? 1 : 0); }

void check_kernel_numerics(const FusionPlan& plan, std::size_t index,
                           const std::vector<void*>& pointer) {
  const Graph& g = *plan.graph;
  const Kernel& k = plan.kernels[index];
  ValueId bad = 0;
  int64_t element = -1;
  for (ValueId out : k.outputs()) {
    const TensorType& t = g.type(out);
    if (!is_float(t.dtype) || !pointer[out]) continue;
    element = first_non_finite(t.dtype, pointer[out], numel(t.shape));
    if (element >= 0) {
      bad = out;
      break;
    }
  }
  if (element < 0) return;
  const profile::KernelInfo info = describe_kernels(plan)[index];

  // The values the kernel reads: its buffers, and views of them, by node.
  auto readable = [&](ValueId v) { return plan.loads(k, v) || g.node(v).op == OpId::input; };
  std::vector<ValueId> operands;
  std::map<ValueId, ValueId> local; // node of g -> node of the replay
  Graph replay;
  auto operand_of = [&](ValueId v) -> ValueId {
    if (auto it = local.find(v); it != local.end()) return it->second;
    ValueId in = replay.add_input("operand" + std::to_string(operands.size()), g.type(v));
    operands.push_back(v);
    local[v] = in;
    return in;
  };
  // Operands that arrived non-finite: the value came from outside this kernel.
  std::string arrived;
  auto check_operand = [&](ValueId v) {
    const TensorType& t = g.type(v);
    const void* bytes = pointer[plan.view_of[v]];
    if (!arrived.empty() || !is_float(t.dtype) || !bytes) return;
    if (int64_t e = first_non_finite(t.dtype, bytes, numel(t.shape)); e >= 0)
      arrived =
          value_name(g, v) + " already held a non-finite value (element " + std::to_string(e) + ")";
  };

  std::string origin;
  // An in-place kernel wrote over one of its operands (or a donated input): it cannot be
  // replayed, and that operand now holds the output.
  const bool replayable = !k.in_place() && k.over_inputs.empty() &&
                          (k.kind == KernelKind::loop || k.kind == KernelKind::row ||
                           k.kind == KernelKind::reduce || k.kind == KernelKind::scatter_add);
  if (replayable) {
    std::vector<ValueId> body;
    for (ValueId id : k.body) {
      if (readable(id)) continue;
      Node n = g.node(id);
      for (ValueId& in : n.inputs)
        in = operand_of(in); // computed earlier in the body, or read from a buffer
      local[id] = replay.add(std::move(n));
      replay.add_output("node" + std::to_string(id), local[id]);
      body.push_back(id);
    }
    for (ValueId v : operands)
      check_operand(v);
    if (arrived.empty()) {
      std::vector<F64Tensor> inputs;
      for (ValueId v : operands)
        inputs.push_back(to_f64(from_bytes(g.type(v), pointer[plan.view_of[v]])));
      std::vector<F64Tensor> values = interpret(replay, inputs);
      for (std::size_t i = 0; i < body.size() && origin.empty(); ++i) {
        const TensorType& t = g.type(body[i]);
        if (!is_float(t.dtype)) continue;
        for (std::size_t e = 0; e < values[i].data.size(); ++e) {
          double v = values[i].data[e];
          if (std::isfinite(v) && std::abs(v) <= largest(t.dtype)) continue;
          origin = value_name(g, body[i]) + " made " + describe(v) + " (element " +
                   std::to_string(e) + " of " + to_string(t) + ") from finite operands";
          break;
        }
      }
    }
  } else {
    for (ValueId v : k.reads)
      if ((!k.in_place() || plan.view_of[v] != k.overwrites) &&
          std::none_of(k.over_inputs.begin(), k.over_inputs.end(),
                       [&](const auto& pair) { return pair.second == plan.view_of[v]; }))
        check_operand(v);
  }
  if (origin.empty() && arrived.empty())
    origin = value_name(g, k.root) + " made a non-finite value from finite operands";
  std::string what =
      "sinter: non-finite value (--check-numerics): " +
      (arrived.empty() ? origin : arrived + ", read by " + value_name(g, k.root)) + "; kernel " +
      info.name + " (" + profile::role_name(info.role) + "), output " + value_name(g, bad) +
      " element " + std::to_string(element) +
      (arrived.empty() ? " — the values overflowed or left the op's domain: lower the learning "
                         "rate, clip gradients, or guard the op (a log of 0, a division by 0)"
                       : " — the value came from outside the step: check that input");
  throw NumericsError(what);
}

} // namespace sinter
