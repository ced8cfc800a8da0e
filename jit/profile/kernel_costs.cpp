// jit/profile/kernel_costs.cpp — kernel names, roles, bytes and FLOPs for the profiler
#include "jit/profile/kernel_costs.hpp"
#include "jit/train/step_roles.hpp"

#include "jit/backend/attention_layout.hpp"
#include "ops/registry.hpp"

#include <set>
#include <string_view>

namespace sinter {
namespace {

bool has_component(std::string_view path, std::string_view component) {
  while (!path.empty()) {
    std::size_t dot = path.find('.');
    if (path.substr(0, dot) == component) return true;
    if (dot == std::string_view::npos) break;
    path.remove_prefix(dot + 1);
  }
  return false;
}

int64_t kernel_flops(const Graph& g, const FusionPlan& plan, const Kernel& k) {
  const Node& root = g.node(k.root);
  if (k.kind == KernelKind::gemm) {
    const Shape& a = g.type(k.gemm_a.logical).shape;
    int64_t inner = k.gemm_a.transposed ? a[a.size() - 2] : a.back();
    return 2 * numel(root.type.shape) * inner;
  }
  if (k.kind == KernelKind::attention) {
    AttentionLayout l = attention_layout(g, root);
    int64_t forward = 2 * l.batches * l.tq * l.tk * (l.d + l.dv);
    return l.backward ? forward * 5 / 2 : forward;
  }
  if (k.kind == KernelKind::collective) return 0;
  int64_t flops = 0;
  for (ValueId id : k.body) {
    const Node& n = g.node(id);
    if (n.op == OpId::input || n.op == OpId::constant || n.op == OpId::iota ||
        (is_primitive(n.op) && op_def(n.op).fusion == FusionCost::index_only))
      continue;
    if (plan.loads(k, id)) continue;
    bool reduces = op_def(n.op).kernel_kind == KernelKind::reduce;
    flops += reduces ? numel(g.type(n.inputs[0]).shape) : numel(n.type.shape);
  }
  return flops;
}

/// Bytes kernel `k` reads from buffer `r`: all of it, except a table that the kernel only
/// gathers rows from, of which it reads the rows gathered.
int64_t read_bytes(const Graph& g, const FusionPlan& plan, const Kernel& k, ValueId r) {
  const auto whole = static_cast<int64_t>(byte_size(g.type(r)));
  int64_t gathered = 0;
  for (ValueId id : k.body) {
    const Node& n = g.node(id);
    for (std::size_t i = 0; i < n.inputs.size(); ++i) {
      if (plan.view_of[n.inputs[i]] != r || plan.view_of[n.inputs[i]] == plan.view_of[id]) continue;
      if (n.op != OpId::gather || i != 0) return whole;
      gathered += static_cast<int64_t>(byte_size(n.type));
    }
  }
  return gathered > 0 ? std::min(gathered, whole) : whole;
}

} // namespace

std::vector<profile::KernelInfo> describe_kernels(const FusionPlan& plan) {
  const Graph& g = *plan.graph;
  // Which inputs each value depends on: a teacher's weights, a trained parameter.
  std::set<std::string> trained;
  for (const NamedValue& out : g.outputs())
    if (std::optional<std::string> input = step_names::replaced_input(out.name))
      trained.insert(*input);
  std::vector<bool> reads_teacher(g.size(), false), reads_trained(g.size(), false);
  for (const NamedValue& in : g.inputs()) {
    reads_teacher[in.id] = in.name.starts_with("teacher.");
    reads_trained[in.id] = trained.count(in.name) != 0;
  }
  for (ValueId id = 0; id < g.size(); ++id)
    for (ValueId in : g.node(id).inputs) {
      reads_teacher[id] = reads_teacher[id] || reads_teacher[in];
      reads_trained[id] = reads_trained[id] || reads_trained[in];
    }

  std::vector<profile::KernelInfo> out;
  for (std::size_t i = 0; i < plan.kernels.size(); ++i) {
    const Kernel& k = plan.kernels[i];
    const Node& root = g.node(k.root);
    profile::KernelInfo info;
    info.path = g.scope_path(root.scope);
    info.kind = kernel_kind_name(k.kind);
    info.gemm = k.kind == KernelKind::gemm;
    if (k.kind == KernelKind::collective || info.path.starts_with("data_parallel"))
      info.role = profile::Role::collective;
    else if (info.path.starts_with("optimizer"))
      info.role = profile::Role::optimizer;
    else if (has_component(info.path, "bwd"))
      info.role = profile::Role::backward;
    else if (reads_teacher[k.root] && !reads_trained[k.root])
      info.role = profile::Role::teacher;
    info.name = "k" + std::to_string(i) + " " + (info.path.empty() ? "-" : info.path) + " " +
                info.kind + " " + std::string(op_name(root.op));
    for (ValueId r : k.reads)
      info.bytes += read_bytes(g, plan, k, r);
    for (ValueId o : k.outputs())
      info.bytes += static_cast<int64_t>(byte_size(g.type(o)));
    info.flops = kernel_flops(g, plan, k);
    out.push_back(std::move(info));
  }
  return out;
}

} // namespace sinter
