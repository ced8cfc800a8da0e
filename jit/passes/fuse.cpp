// jit/passes/fuse.cpp — materialisation decisions and kernel grouping for the lowered graph
#include "jit/passes/fuse.hpp"

#include "ops/registry.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace sinter {
namespace {

/// Ops that only move or pick elements: recomputing them in each consumer costs no arithmetic.
bool index_only(OpId op) { return op_def(op).fusion == FusionCost::index_only; }

/// One cheap instruction per element: worth recomputing rather than storing and reloading.
bool cheap_elementwise(OpId op) { return op_def(op).fusion == FusionCost::cheap; }

bool always_root(OpId op) { return op_def(op).fusion == FusionCost::root; }

bool swaps_last_two(const Node& n) {
  const auto& perm = n.attrs.ints;
  std::size_t r = perm.size();
  if (r < 2) return false;
  for (std::size_t i = 0; i + 2 < r; ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return perm[r - 2] == static_cast<int64_t>(r - 1) && perm[r - 1] == static_cast<int64_t>(r - 2);
}

KernelKind kind_of(OpId op) {
  switch (op) {
  case OpId::reduce_sum:
  case OpId::reduce_max: return KernelKind::reduce;
  case OpId::matmul: return KernelKind::gemm;
  case OpId::scatter_add: return KernelKind::scatter_add;
  case OpId::fused_attention:
  case OpId::fused_attention_lse:
  case OpId::fused_attention_grad: return KernelKind::attention;
  default: return KernelKind::loop;
  }
}

const char* kind_name(KernelKind k) {
  switch (k) {
  case KernelKind::loop: return "loop";
  case KernelKind::reduce: return "reduce";
  case KernelKind::gemm: return "gemm";
  case KernelKind::scatter_add: return "scatter_add";
  case KernelKind::attention: return "attention";
  }
  return "?";
}

} // namespace

bool is_fused_attention(OpId op) { return kind_of(op) == KernelKind::attention; }

namespace {

/// Buffers a loop kernel reads only at the index it writes (through elementwise ops alone).
std::vector<ValueId> aligned_reads(const FusionPlan& plan, const Kernel& k) {
  const Graph& g = *plan.graph;
  std::map<ValueId, bool> aligned; // buffer -> every access aligned so far
  std::vector<std::pair<ValueId, bool>> stack;
  for (ValueId out : k.outputs())
    stack.push_back({out, true});
  std::set<std::pair<ValueId, bool>> seen;
  Shape root_shape = g.type(k.root).shape;
  while (!stack.empty()) {
    auto [v, at_root_index] = stack.back();
    stack.pop_back();
    if (!seen.insert({v, at_root_index}).second) continue;
    bool in_memory = !k.writes(v) && (plan.materialized[v] || plan.view_of[v] != v);
    if (in_memory) {
      bool ok = at_root_index && g.type(v).shape == root_shape;
      auto [it, inserted] = aligned.emplace(plan.view_of[v], ok);
      if (!inserted) it->second = it->second && ok;
      continue;
    }
    bool elementwise = g.node(v).op != OpId::input && is_primitive(g.node(v).op) &&
                       !index_only(g.node(v).op) && !always_root(g.node(v).op);
    for (ValueId in : g.node(v).inputs)
      stack.push_back({in, at_root_index && elementwise});
  }
  std::vector<ValueId> out;
  for (auto [buffer, ok] : aligned)
    if (ok) out.push_back(buffer);
  return out;
}

/// Earlier kernels (still standing) a loop kernel may join: bounds the search and how much
/// earlier a merged kernel's outputs come to life.
constexpr std::size_t merge_window = 32;

/// Merges loop kernels over one shape into a single pass with several outputs: kernel j joins
/// an earlier kernel i when everything j reads exists by the time i runs (written before i, or
/// by i itself and then read only at the element being written), and the two share a read
/// buffer or j reads what i writes; or i moves down into j when no kernel in between reads
/// what i writes. Saves a pass over shared inputs and a round trip through
/// memory: AdamW's m, v and parameter updates become one kernel, a cast joins its producer.
void merge_sibling_loops(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  auto& kernels = plan.kernels;
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::vector<std::size_t> writer(g.size(), none); // buffer -> kernel writing it
  for (std::size_t k = 0; k < kernels.size(); ++k)
    for (ValueId out : kernels[k].outputs())
      writer[out] = k;
  std::vector<bool> merged(kernels.size(), false);
  for (std::size_t j = 0; j < kernels.size(); ++j) {
    const Kernel& late = kernels[j];
    if (late.kind != KernelKind::loop) continue;
    std::vector<ValueId> aligned = aligned_reads(plan, late);
    std::size_t looked_at = 0; // kernels that still exist, counted towards the window
    for (std::size_t i = j; i-- > 0 && looked_at < merge_window;) {
      if (merged[i]) continue;
      ++looked_at;
      Kernel& early = kernels[i];
      if (early.kind != KernelKind::loop || g.type(early.root).shape != g.type(late.root).shape)
        continue;
      bool aligned_ok = true, ready_at_early = true, related = false;
      for (ValueId r : late.reads) {
        if (early.writes(r)) {
          related = true;
          aligned_ok &= std::find(aligned.begin(), aligned.end(), r) != aligned.end();
        } else {
          ready_at_early &= writer[r] == none || writer[r] < i;
          related |= std::find(early.reads.begin(), early.reads.end(), r) != early.reads.end();
        }
      }
      if (!aligned_ok || !related) continue;
      // Otherwise the early kernel may move down to the late one, if nothing in between reads
      // what it writes.
      bool movable = !ready_at_early;
      for (std::size_t k = i + 1; movable && k < j; ++k)
        if (!merged[k])
          for (ValueId r : kernels[k].reads)
            movable &= !early.writes(r);
      if (!ready_at_early && !movable) continue;
      Kernel& into = ready_at_early ? early : kernels[j];
      const Kernel& from = ready_at_early ? kernels[j] : early;
      std::size_t target = ready_at_early ? i : j;
      for (ValueId out : from.outputs()) {
        into.extra_outputs.push_back(out);
        writer[out] = target;
      }
      for (ValueId r : from.reads)
        if (!into.writes(r) &&
            std::find(into.reads.begin(), into.reads.end(), r) == into.reads.end())
          into.reads.push_back(r);
      std::erase_if(into.reads, [&](ValueId r) { return into.writes(r); });
      into.body.insert(into.body.end(), from.body.begin(), from.body.end());
      std::sort(into.body.begin(), into.body.end());
      into.body.erase(std::unique(into.body.begin(), into.body.end()), into.body.end());
      merged[ready_at_early ? j : i] = true;
      break;
    }
  }
  std::vector<Kernel> kept;
  for (std::size_t k = 0; k < kernels.size(); ++k)
    if (!merged[k]) kept.push_back(std::move(kernels[k]));
  kernels = std::move(kept);
}

/// The fused attention ops over the same operands become one kernel: the forward takes its
/// log-sum-exp (which autodiff adds later) and the three gradients share one pass over the
/// scores. Each joins the first such kernel, which runs after all of its operands exist.
void merge_attention_kernels(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  auto& kernels = plan.kernels;
  auto same_family = [&](const Node& a, const Node& b) {
    bool forward_a = a.op != OpId::fused_attention_grad;
    bool forward_b = b.op != OpId::fused_attention_grad;
    return forward_a == forward_b && a.inputs == b.inputs && a.attrs.real == b.attrs.real &&
           a.attrs.flag == b.attrs.flag;
  };
  std::vector<bool> merged(kernels.size(), false);
  for (std::size_t j = 0; j < kernels.size(); ++j) {
    if (kernels[j].kind != KernelKind::attention) continue;
    for (std::size_t i = 0; i < j; ++i) {
      if (merged[i] || kernels[i].kind != KernelKind::attention ||
          !same_family(g.node(kernels[i].root), g.node(kernels[j].root)))
        continue;
      kernels[i].extra_outputs.push_back(kernels[j].root);
      kernels[i].body.push_back(kernels[j].root);
      merged[j] = true;
      break;
    }
  }
  std::vector<Kernel> kept;
  for (std::size_t k = 0; k < kernels.size(); ++k)
    if (!merged[k]) kept.push_back(std::move(kernels[k]));
  kernels = std::move(kept);
}

/// Lets each loop kernel write over a buffer that dies in it, when that is safe.
void choose_in_place(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  std::vector<bool> is_output(g.size(), false);
  for (const NamedValue& out : g.outputs())
    is_output[out.id] = true;
  std::vector<std::size_t> last_use(g.size(), 0);
  for (std::size_t k = 0; k < plan.kernels.size(); ++k)
    for (ValueId r : plan.kernels[k].reads)
      last_use[r] = k;
  std::vector<bool> taken(g.size(), false); // one kernel writes over a buffer at most once
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    Kernel& kernel = plan.kernels[k];
    kernel.overwrites = kernel.root;
    if (kernel.kind != KernelKind::loop || is_output[kernel.root]) continue;
    // Each output is stored after every output's value is computed (the schedules do so), so
    // an aligned read is still the old value whichever output takes over the buffer.
    const TensorType& t = g.type(kernel.root);
    for (ValueId r : aligned_reads(plan, kernel)) {
      const TensorType& rt = g.type(r);
      bool same_bytes = numel(rt.shape) * static_cast<int64_t>(dtype_bytes(rt.dtype)) ==
                        numel(t.shape) * static_cast<int64_t>(dtype_bytes(t.dtype));
      if (g.node(r).op == OpId::input || is_output[r] || last_use[r] != k || !same_bytes ||
          taken[r])
        continue;
      kernel.overwrites = r;
      taken[r] = true;
      break;
    }
  }
}

} // namespace

FusionPlan fuse(const Graph& g) {
  std::size_t n = g.size();
  FusionPlan plan;
  plan.graph = &g;
  plan.materialized.assign(n, false);
  plan.view_of.resize(n);
  for (ValueId id = 0; id < n; ++id)
    plan.view_of[id] = id;

  std::vector<std::vector<ValueId>> consumers(n);
  for (ValueId id = 0; id < n; ++id)
    for (ValueId in : g.node(id).inputs)
      consumers[in].push_back(id);
  std::vector<bool> is_output(n, false);
  for (const NamedValue& out : g.outputs())
    is_output[out.id] = true;

  auto& mat = plan.materialized;
  // Recompute cost of a value if everything upstream that is not stored were inlined (capped):
  // cheap elementwise values with a small cost are recomputed in each consumer instead of
  // being stored. Which values are stored depends on these costs and the costs on what is
  // stored, so the two are settled together: a few rounds, each costing stored values 0 (the
  // first round knows only the values that are always stored). A cast of a stored residual
  // sum, say, is then recomputed by each consumer instead of becoming a kernel of its own.
  constexpr int64_t max_duplicated_cost = 3;
  std::vector<int64_t> cone_cost(n, 0);
  std::vector<bool> previous;
  for (int round = 0; round < 4 && previous != mat; ++round) {
    previous = mat;
    for (ValueId id = 0; id < n; ++id) {
      const Node& node = g.node(id);
      cone_cost[id] = 0;
      if (node.op == OpId::input || always_root(node.op)) continue;
      int64_t cost =
          index_only(node.op) ? 0 : (cheap_elementwise(node.op) ? 1 : max_duplicated_cost + 1);
      for (ValueId in : node.inputs)
        cost += previous[in] ? 0 : cone_cost[in];
      cone_cost[id] = std::min(cost, max_duplicated_cost + 1);
    }

    // Reverse order: a node's consumers are decided before the node itself.
    std::vector<int64_t> uses(n, 0);
    for (ValueId id = static_cast<ValueId>(n); id-- > 0;) {
      const Node& node = g.node(id);
      bool root = node.op == OpId::input || always_root(node.op) || is_output[id];
      int64_t count = 0;
      for (ValueId c : consumers[id])
        count += mat[c] ? 1 : uses[c];
      if (!root && !index_only(node.op) && count > 1) root = cone_cost[id] > max_duplicated_cost;
      mat[id] = root;
      uses[id] = root ? 1 : count;
    }
  }
  // A GEMM reads buffers: an operand that is not one, a reshape of one, or the last-two
  // transpose of either, is stored first. (Storing more only shortens other kernels' bodies.)
  auto in_buffer = [&](ValueId id) {
    while (!mat[id] && g.node(id).op == OpId::reshape)
      id = g.node(id).inputs[0];
    return mat[id];
  };
  for (ValueId id = 0; id < n; ++id) {
    if (is_fused_attention(g.node(id).op)) { // the kernel reads contiguous operands
      for (ValueId in : g.node(id).inputs)
        if (!in_buffer(in)) mat[in] = true;
      continue;
    }
    if (g.node(id).op != OpId::matmul) continue;
    for (ValueId in : g.node(id).inputs) {
      const Node& operand = g.node(in);
      bool transposed_buffer =
          operand.op == OpId::permute && swaps_last_two(operand) && in_buffer(operand.inputs[0]);
      if (!in_buffer(in) && !transposed_buffer) mat[in] = true;
    }
  }

  // Reshapes of buffers are views: no kernel, no memory, the same flat order.
  for (ValueId id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    if (node.op == OpId::reshape) {
      ValueId src = plan.view_of[node.inputs[0]];
      if (mat[src]) plan.view_of[id] = src;
    }
  }

  for (ValueId id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    if (!mat[id] || node.op == OpId::input) continue;
    if (plan.view_of[id] != id && !is_output[id]) continue;
    Kernel k;
    k.root = id;
    k.kind = kind_of(node.op);
    // Collect the inlined body: everything reachable without crossing a buffer.
    std::vector<bool> seen(n, false);
    std::vector<ValueId> stack{id};
    seen[id] = true;
    while (!stack.empty()) {
      ValueId v = stack.back();
      stack.pop_back();
      k.body.push_back(v);
      if (k.kind == KernelKind::attention) {
        for (ValueId in : g.node(v).inputs)
          if (std::find(k.reads.begin(), k.reads.end(), plan.view_of[in]) == k.reads.end())
            k.reads.push_back(plan.view_of[in]);
        break;
      }
      if (k.kind == KernelKind::gemm && v == id) {
        for (ValueId in : g.node(v).inputs) {
          ValueId src = in;
          bool transposed = false;
          if (!mat[src] && g.node(src).op == OpId::permute) {
            src = g.node(src).inputs[0];
            transposed = true;
          }
          ValueId buffer = plan.view_of[src];
          (k.reads.empty() ? k.gemm_a : k.gemm_b) = GemmOperand{buffer, src, transposed};
          k.reads.push_back(buffer);
        }
        break;
      }
      for (ValueId in : g.node(v).inputs) {
        ValueId buffer = plan.view_of[in];
        if (mat[in] || mat[buffer]) {
          if (std::find(k.reads.begin(), k.reads.end(), buffer) == k.reads.end())
            k.reads.push_back(buffer);
          // A view is still walked as an index mapping over its buffer.
          if (buffer != in && !seen[in]) {
            seen[in] = true;
            k.body.push_back(in);
          }
          continue;
        }
        if (!seen[in]) {
          seen[in] = true;
          stack.push_back(in);
        }
      }
    }
    std::sort(k.body.begin(), k.body.end());
    k.body.erase(std::unique(k.body.begin(), k.body.end()), k.body.end());
    plan.kernels.push_back(std::move(k));
  }
  merge_attention_kernels(plan);
  merge_sibling_loops(plan);
  choose_in_place(plan);
  return plan;
}

std::string FusionPlan::print() const {
  std::ostringstream os;
  os << "fusion: " << kernels.size() << " kernels\n";
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const Kernel& k = kernels[i];
    os << "  kernel " << i << " " << kind_name(k.kind) << " -> %" << k.root << " "
       << to_string(graph->type(k.root));
    for (ValueId extra : k.extra_outputs)
      os << ", %" << extra << " " << to_string(graph->type(extra));
    os << "\n    body:";
    for (ValueId v : k.body)
      os << " %" << v << ":" << op_name(graph->node(v).op);
    if (k.in_place()) os << "  (in place over %" << k.overwrites << ")";
    os << "\n    reads:";
    for (ValueId v : k.reads)
      os << " %" << v;
    if (k.kind == KernelKind::gemm)
      os << "  (a %" << k.gemm_a.buffer << (k.gemm_a.transposed ? "ᵀ" : "") << ", b %"
         << k.gemm_b.buffer << (k.gemm_b.transposed ? "ᵀ" : "") << ")";
    os << "\n";
  }
  return os.str();
}

bool reduces_last_axis(const Graph& g, const Kernel& k) {
  const Node& root = g.node(k.root);
  std::size_t rank = g.type(root.inputs[0]).shape.size();
  return rank == 0 || std::find(root.attrs.ints.begin(), root.attrs.ints.end(),
                                static_cast<int64_t>(rank - 1)) != root.attrs.ints.end();
}

} // namespace sinter
