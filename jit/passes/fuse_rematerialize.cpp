// jit/passes/fuse_rematerialize.cpp — fusion trading arithmetic for memory: stored values
// recomputed by their readers, and GEMM operands computed a second time right before the GEMM
#include "jit/passes/fuse_internal.hpp"
#include "jit/passes/passes.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

namespace sinter {

using namespace fuse_steps;

namespace {

/// Per-element work of computing `op` inside another kernel (root ops are never recomputed).
int64_t recompute_cost(OpId op) {
  if (index_only(op)) return 0;
  return cheap_elementwise(op) ? 1 : 4;
}

/// Most per-element work a stored value may take to be recomputed instead (GELU's tanh from the
/// GEMM output it came from costs 10) and most kernels that would each recompute it.
constexpr int64_t max_rematerialized_cost = 12;
constexpr std::size_t max_rematerializing_kernels = 6;
/// A GEMM operand recomputed once, by a kernel of its own, may cost more (GELU's output from
/// the GEMM output before it costs 14; a layer norm's output from the residual stream, 13).
constexpr int64_t max_recomputed_operand_cost = 24;

/// The buffers a stored value's kernel would read (its inlined cone's stored leaves), and what
/// recomputing the cone costs per element; cost past `limit` stops the walk (and is returned).
struct Cone {
  std::vector<ValueId> leaves;
  std::vector<ValueId> body; ///< the root and the values inlined with it
  int64_t cost = 0;
};
Cone stored_cone(const Graph& g, const std::vector<bool>& mat, ValueId root, int64_t limit) {
  Cone cone;
  cone.body.push_back(root);
  cone.cost = recompute_cost(g.node(root).op);
  std::vector<ValueId> stack(g.node(root).inputs.begin(), g.node(root).inputs.end());
  std::set<ValueId> seen;
  while (!stack.empty() && cone.cost <= limit) {
    ValueId v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    if (mat[v]) {
      cone.leaves.push_back(v);
      continue;
    }
    cone.body.push_back(v);
    cone.cost += recompute_cost(g.node(v).op);
    for (ValueId in : g.node(v).inputs)
      stack.push_back(in);
  }
  return cone;
}

/// Whether recomputing `value` from its cone's leaves at its last use keeps fewer bytes alive:
/// the leaves that `last_use` frees earlier, kept until then instead, are smaller than the value.
/// If so, records their longer lives in `last_use`.
bool recompute_saves_bytes(const Graph& g, const Cone& cone, ValueId value,
                           std::vector<std::size_t>& last_use) {
  std::size_t kept_longer = 0;
  for (ValueId leaf : cone.leaves)
    if (last_use[leaf] < last_use[value]) kept_longer += byte_size(g.type(leaf));
  if (kept_longer >= byte_size(g.type(value))) return false;
  for (ValueId leaf : cone.leaves)
    last_use[leaf] = std::max(last_use[leaf], last_use[value]);
  return true;
}

/// The values worth computing a second time for a GEMM that reads them long after their other
/// readers (see recompute_late_gemm_operands), and where each of those GEMMs runs.
struct LateOperand {
  ValueId value;
  ValueId gemm; ///< the GEMM node (a kernel root) that reads it last
  Cone cone;
};

std::vector<LateOperand> late_gemm_operands(const Graph& g, const FusionPlan& plan) {
  std::size_t n = g.size(), count = plan.kernels.size();
  const std::vector<bool>& mat = plan.materialized;
  // Kernel positions: where each buffer is written, read last, and read before that.
  std::vector<std::size_t> written(n, 0), last_read(n, 0), previous_read(n, 0);
  std::vector<bool> read(n, false), always_alive(n, false);
  for (const NamedValue& in : g.inputs())
    always_alive[in.id] = true;
  for (const NamedValue& out : g.outputs())
    always_alive[plan.view_of[out.id]] = true;
  for (std::size_t k = 0; k < count; ++k) {
    for (ValueId out : plan.kernels[k].outputs())
      written[out] = k;
    for (ValueId r : plan.kernels[k].reads) {
      if (read[r] && last_read[r] == k) continue;
      previous_read[r] = read[r] ? last_read[r] : written[r];
      last_read[r] = k;
      read[r] = true;
    }
  }
  for (ValueId id = 0; id < n; ++id)
    if (always_alive[id]) last_read[id] = count;
  // Long enough to matter: an eighth of the step (the forward-to-backward distance of a
  // layer's activations is half of it on average).
  std::size_t long_gap = std::max<std::size_t>(count / 8, 2);
  std::vector<LateOperand> out;
  for (ValueId id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    if (!mat[id] || !read[id] || always_alive[id] || node.op == OpId::input ||
        always_root(node.op) || index_only(node.op))
      continue;
    const Kernel& last = plan.kernels[last_read[id]];
    bool gemm_operand =
        last.kind == KernelKind::gemm && (last.gemm_a.buffer == id || last.gemm_b.buffer == id);
    if (!gemm_operand || last_read[id] - previous_read[id] < long_gap) continue;
    Cone cone = stored_cone(g, mat, id, max_recomputed_operand_cost);
    if (cone.cost > max_recomputed_operand_cost || !recompute_saves_bytes(g, cone, id, last_read))
      continue;
    out.push_back({id, last.root, std::move(cone)});
  }
  return out;
}

} // namespace

/// Stops storing values that are cheap to recompute from buffers which are alive anyway, or
/// whose longer life costs fewer bytes than the value: each kernel that read the value computes
/// it again from those buffers. A buffer kept longer is kept only over part of the value's own
/// life (it was read when the value was computed), so at every point of the step fewer bytes
/// are alive. The cases it exists for are the backward pass's: GELU's tanh and x², stored by the
/// forward kernel for the gradient, recomputed from the GEMM output the gradient reads anyway
/// (PyTorch keeps GELU's input alone, too); a layer norm's centred f32 input, recomputed from
/// the bf16 residual stream and the row means. Kernels run in the order of their roots, so a
/// buffer's last reader is its highest-numbered reader.
void fuse_steps::rematerialize(const Graph& g, std::vector<bool>& mat,
                               const std::vector<bool>& is_output,
                               const std::vector<bool>& pinned) {
  std::size_t n = g.size();
  constexpr int64_t unlimited = std::numeric_limits<int64_t>::max();
  std::vector<std::size_t> last_use(n, 0);
  std::vector<std::size_t> readers(n, 0);
  for (ValueId id = 0; id < n; ++id) {
    if (g.node(id).op == OpId::input || is_output[id]) last_use[id] = n; // alive throughout
    if (!mat[id] || g.node(id).op == OpId::input) continue;
    for (ValueId leaf : stored_cone(g, mat, id, unlimited).leaves) {
      last_use[leaf] = std::max<std::size_t>(last_use[leaf], id);
      ++readers[leaf];
    }
  }
  for (ValueId id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    if (!mat[id] || pinned[id] || is_output[id] || node.op == OpId::input || always_root(node.op) ||
        readers[id] == 0 || readers[id] > max_rematerializing_kernels)
      continue;
    Cone cone = stored_cone(g, mat, id, max_rematerialized_cost);
    if (cone.cost > max_rematerialized_cost || !recompute_saves_bytes(g, cone, id, last_use))
      continue;
    // Its readers now read the leaves instead.
    mat[id] = false;
    for (ValueId leaf : cone.leaves)
      readers[leaf] += readers[id] - 1;
  }
}

Graph recompute_late_gemm_operands(const Graph& g, FusionOptions options,
                                   const std::function<bool(const FusionPlan&)>& fits) {
  if (!options.rematerialize) return g;
  FusionPlan plan = fuse(g, options);
  if (fits && fits(plan)) return g;
  std::vector<LateOperand> late = late_gemm_operands(g, plan);
  if (late.empty()) return g;
  std::map<ValueId, std::vector<const LateOperand*>> before; // GEMM node -> operands to redo
  for (const LateOperand& operand : late)
    before[operand.gemm].push_back(&operand);

  Graph out;
  std::vector<uint32_t> scope_map = copy_scopes(g, out);
  std::vector<ValueId> mapped(g.size(), 0);
  for (const NamedValue& in : g.inputs())
    mapped[in.id] = out.add_input(in.name, g.type(in.id));
  auto copy = [&](ValueId id, const std::map<ValueId, ValueId>& redone, bool recomputed) {
    Node node = g.node(id);
    for (ValueId& in : node.inputs) {
      auto it = redone.find(in);
      in = it != redone.end() ? it->second : mapped[in];
    }
    out.set_current_scope(scope_map[g.node(id).scope]);
    return recomputed ? out.add_recomputed(std::move(node)) : out.add(std::move(node));
  };
  for (ValueId id = 0; id < g.size(); ++id) {
    if (g.node(id).op == OpId::input) continue;
    std::map<ValueId, ValueId> redone; // original -> its second computation
    if (auto it = before.find(id); it != before.end()) {
      for (const LateOperand* operand : it->second) {
        std::vector<ValueId> body = operand->cone.body;
        // The views between the value and the GEMM (a reshape, the transpose) read the copy.
        for (ValueId in : g.node(id).inputs)
          for (ValueId v = in;
               v != operand->value && index_only(g.node(v).op) && g.node(v).inputs.size() == 1;
               v = g.node(v).inputs[0])
            body.push_back(v);
        std::sort(body.begin(), body.end());
        body.erase(std::unique(body.begin(), body.end()), body.end());
        for (ValueId v : body)
          redone[v] = copy(v, redone, !index_only(g.node(v).op));
      }
    }
    mapped[id] = copy(id, redone, false);
  }
  out.set_current_scope(0);
  for (const NamedValue& o : g.outputs())
    out.add_output(o.name, mapped[o.id]);
  out.set_donations(g.donations());
  return out;
}

} // namespace sinter
