// jit/passes/fuse.cpp — fusion's entry point: which values are stored (the partition), each
// kernel's inlined body, the steps that follow (jit/passes/fuse_internal.hpp), the printout
#include "jit/passes/fuse_internal.hpp"

#include <algorithm>
#include <set>
#include <sstream>

namespace sinter {

using namespace fuse_steps;

namespace {

bool swaps_last_two(const Node& n) {
  const auto& perm = n.attrs.ints;
  std::size_t r = perm.size();
  if (r < 2) return false;
  for (std::size_t i = 0; i + 2 < r; ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return perm[r - 2] == static_cast<int64_t>(r - 1) && perm[r - 1] == static_cast<int64_t>(r - 2);
}

} // namespace

bool is_fused_attention(OpId op) { return kind_of(op) == KernelKind::attention; }
bool is_collective(OpId op) { return kind_of(op) == KernelKind::collective; }

bool attention_operand_may_be_strided(const Node& node, std::size_t position) {
  if (position < 3) return true;                                                    // q, k, v
  return node.op == OpId::fused_attention_grad && (position == 3 || position == 5); // o, dO
}

std::optional<StridedView> attention_operand_view(const Graph& g, ValueId value,
                                                  const std::function<bool(ValueId)>& is_buffer) {
  std::optional<StridedView> view = strided_view(g, value, is_buffer);
  if (!view) return std::nullopt;
  const TensorType& t = g.type(value);
  const int64_t piece = 16 / static_cast<int64_t>(dtype_bytes(t.dtype)); // elements in 16 bytes
  if (t.shape.size() < 2 || view->offset % piece != 0 || view->strides.back() != 1)
    return std::nullopt;
  for (std::size_t i = 0; i + 1 < t.shape.size(); ++i)
    if (t.shape[i] != 1 && view->strides[i] % piece != 0) return std::nullopt;
  return view;
}

bool is_row_reduction(const Graph& g, ValueId v) {
  const Node& n = g.node(v);
  if (kind_of(n.op) != KernelKind::reduce || n.inputs.empty()) return false;
  std::size_t rank = g.type(n.inputs[0]).shape.size();
  return rank >= 1 && n.attrs.ints.size() == 1 && n.attrs.ints[0] == static_cast<int64_t>(rank) - 1;
}

bool has_fused_attention(const Graph& g) {
  for (ValueId id = 0; id < g.size(); ++id)
    if (is_fused_attention(g.node(id).op)) return true;
  return false;
}

namespace {

/// `v` under any reshapes and casts.
ValueId under_reshapes_and_casts(const Graph& g, ValueId v) {
  while (g.node(v).op == OpId::reshape || g.node(v).op == OpId::cast)
    v = g.node(v).inputs[0];
  return v;
}

/// Whether a reduction over the last axis reads `id`'s rows, through at most `depth` elementwise
/// ops: the value would be inlined into a row kernel (a loss's log-sum-exp), not a loop.
bool rows_reduced(const Graph& g, const std::vector<std::vector<ValueId>>& consumers, ValueId id,
                  int depth) {
  int64_t length = g.type(id).shape.empty() ? 1 : g.type(id).shape.back();
  for (ValueId c : consumers[id]) {
    const Node& n = g.node(c);
    const Shape& operand = g.type(n.inputs[0]).shape;
    if (kind_of(n.op) == KernelKind::reduce && !operand.empty() && operand.back() == length &&
        std::find(n.attrs.ints.begin(), n.attrs.ints.end(),
                  static_cast<int64_t>(operand.size() - 1)) != n.attrs.ints.end())
      return true;
    if (kind_of(n.op) == KernelKind::loop && depth > 0 && !n.type.shape.empty() &&
        n.type.shape.back() == length && rows_reduced(g, consumers, c, depth - 1))
      return true;
  }
  return false;
}

/// Whether `id` adds a vector, broadcast along its rows, to a GEMM's result (reshapes and casts
/// anywhere between).
bool is_gemm_bias(const Graph& g, ValueId id) {
  const Node& node = g.node(id);
  if (node.op != OpId::add || node.type.shape.empty()) return false;
  for (std::size_t side = 0; side < 2; ++side) {
    ValueId product = under_reshapes_and_casts(g, node.inputs[side]);
    ValueId spread = under_reshapes_and_casts(g, node.inputs[1 - side]);
    if (g.node(product).op != OpId::matmul || g.node(spread).op != OpId::broadcast) continue;
    const Shape& bias = g.type(under_reshapes_and_casts(g, g.node(spread).inputs[0])).shape;
    if (bias.size() == 1 && bias[0] == node.type.shape.back()) return true;
  }
  return false;
}

/// Whether `id` adds a vector, broadcast along its rows, to a GEMM's result, with rows longer
/// than `length` that a row kernel would reduce: `C + broadcast(bias)` with reshapes and casts
/// anywhere between.
bool is_long_gemm_bias(const Graph& g, const std::vector<std::vector<ValueId>>& consumers,
                       ValueId id, int64_t length) {
  const Node& node = g.node(id);
  return is_gemm_bias(g, id) && node.type.shape.back() > length &&
         rows_reduced(g, consumers, id, 4);
}

/// Whether a tanh reads `id` through at most `depth` elementwise ops of `id`'s shape.
bool feeds_tanh(const Graph& g, const std::vector<std::vector<ValueId>>& consumers, ValueId id,
                int depth) {
  for (ValueId c : consumers[id]) {
    const Node& n = g.node(c);
    if (n.type.shape != g.type(id).shape || kind_of(n.op) != KernelKind::loop) continue;
    if (n.op == OpId::tanh) return true;
    if (depth > 0 && feeds_tanh(g, consumers, c, depth - 1)) return true;
  }
  return false;
}

/// The stored values whose kernels inline `id` (reached through values that are not stored).
std::set<ValueId> kernels_inlining(const std::vector<std::vector<ValueId>>& consumers,
                                   const std::vector<bool>& mat, ValueId id) {
  std::set<ValueId> roots, seen;
  std::vector<ValueId> stack(consumers[id].begin(), consumers[id].end());
  while (!stack.empty()) {
    ValueId v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    if (mat[v]) {
      roots.insert(v);
      continue;
    }
    stack.insert(stack.end(), consumers[v].begin(), consumers[v].end());
  }
  return roots;
}

/// The partition: which values are stored (graph inputs and outputs, kernel roots, what a GEMM,
/// attention or collective reads, shared values too costly to recompute); every other value is
/// inlined into the kernels that read it.
std::vector<bool> stored_values(const Graph& g, FusionOptions options) {
  std::size_t n = g.size();
  std::vector<std::vector<ValueId>> consumers(n);
  for (ValueId id = 0; id < n; ++id)
    for (ValueId in : g.node(id).inputs)
      consumers[in].push_back(id);
  std::vector<bool> is_output(n, false);
  for (const NamedValue& out : g.outputs())
    is_output[out.id] = true;

  std::vector<bool> mat(n, false);
  // Recompute cost of a value if everything upstream that is not stored were inlined (capped):
  // cheap elementwise values with a small cost are recomputed in each consumer instead of
  // being stored. Which values are stored depends on these costs and the costs on what is
  // stored, so the two are settled together: a few rounds, each costing stored values 0 (the
  // first round knows only the values that are always stored). A cast of a stored residual
  // sum, say, is then recomputed by each consumer instead of becoming a kernel of its own.
  constexpr int64_t max_duplicated_cost = 3;
  auto own_cost = [](OpId op) {
    return index_only(op) ? 0 : (cheap_elementwise(op) ? 1 : max_duplicated_cost + 1);
  };
  std::vector<int64_t> cone_cost(n, 0);
  std::vector<bool> previous;
  for (int round = 0; round < 4 && previous != mat; ++round) {
    previous = mat;
    for (ValueId id = 0; id < n; ++id) {
      const Node& node = g.node(id);
      cone_cost[id] = 0;
      if (node.op == OpId::input || always_root(node.op)) continue;
      int64_t cost = own_cost(node.op);
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
  // The rounds may stop between two alternating answers (each value of a chain of residual
  // additions stored in one round and recomputed in the next), leaving a chain nothing stores:
  // each layer's kernels would then recompute the whole stream from every earlier GEMM output
  // and keep them all alive. A last pass in graph order, with the final decisions of everything
  // upstream, stores each shared value whose recompute is still too expensive.
  {
    std::vector<int64_t> uses(n, 0);
    for (ValueId id = static_cast<ValueId>(n); id-- > 0;) {
      if (mat[id]) {
        uses[id] = 1;
        continue;
      }
      for (ValueId c : consumers[id])
        uses[id] += mat[c] ? 1 : uses[c];
    }
    for (ValueId id = 0; id < n; ++id) {
      const Node& node = g.node(id);
      cone_cost[id] = 0; // a stored value costs its readers nothing
      if (mat[id]) continue;
      int64_t cost = own_cost(node.op);
      for (ValueId in : node.inputs)
        cost += cone_cost[in];
      if (!index_only(node.op) && uses[id] > 1 && cost > max_duplicated_cost)
        mat[id] = true;
      else
        cone_cost[id] = std::min(cost, max_duplicated_cost + 1);
    }
  }
  // A GEMM reads buffers: an operand that is not one, a reshape of one, or the last-two
  // transpose of either, is stored first. (Storing more only shortens other kernels' bodies.)
  auto in_buffer = [&](ValueId id) {
    while (!mat[id] && g.node(id).op == OpId::reshape)
      id = g.node(id).inputs[0];
    return mat[id];
  };
  // A concat of three or more operands computes each element from one operand, but a kernel
  // evaluates every inlined operand at every element before picking one: operands that are
  // not (reshapes of) buffers are stored first, and the concat copies them (a gradient bucket
  // being packed; the CPU copies such a concat block by block).
  for (ValueId id = 0; id < n; ++id)
    if (g.node(id).op == OpId::concat && g.node(id).inputs.size() >= 3)
      for (ValueId in : g.node(id).inputs)
        if (!in_buffer(in)) mat[in] = true;
  // The first value up a chain of views that a strided attention operand may start from: a
  // buffer, or a computed value (stored for it). Broadcasts and gathers are copied as before.
  auto view_source = [&](ValueId id) {
    if (mat[id]) return true;
    OpId op = g.node(id).op;
    return op == OpId::input || !index_only(op);
  };
  for (ValueId id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    if (is_fused_attention(node.op)) { // the kernel reads contiguous operands, or strided views
      for (std::size_t i = 0; i < node.inputs.size(); ++i) {
        ValueId in = node.inputs[i];
        if (in_buffer(in)) continue;
        std::optional<StridedView> view;
        if (options.attention_operand_views && attention_operand_may_be_strided(node, i))
          view = attention_operand_view(g, in, view_source);
        mat[view ? view->buffer : in] = true;
      }
      continue;
    }
    if (is_collective(g.node(id).op)) {
      // The value under any reshapes is stored where it is computed (a loss as [1], say),
      // so the collective can start right after it.
      ValueId source = g.node(id).inputs[0];
      while (!mat[source] && g.node(source).op == OpId::reshape)
        source = g.node(source).inputs[0];
      mat[source] = true;
      continue;
    }
    if (g.node(id).op != OpId::matmul) continue;
    for (ValueId in : g.node(id).inputs) {
      const Node& operand = g.node(in);
      bool transposed = operand.op == OpId::permute && swaps_last_two(operand);
      if (in_buffer(in) || (transposed && in_buffer(operand.inputs[0]))) continue;
      // A transposed computed value is stored as computed and read transposed (a value
      // recomputed for a weight gradient's GEMM, say), not stored transposed.
      ValueId source = in;
      if (transposed) {
        source = operand.inputs[0];
        while (!mat[source] && g.node(source).op == OpId::reshape)
          source = g.node(source).inputs[0];
      }
      // A gathered value (rows picked by in-step sifting, say) is stored in its own row order
      // like a computed one: as large as the transposed copy, and copied row by row.
      const OpId source_op = g.node(source).op;
      mat[source != in && (!index_only(source_op) || source_op == OpId::gather) ? source : in] =
          true;
    }
  }
  // Long rows' GEMM biases, stored for the GEMM's epilogue (FusionOptions::gemm_bias_rows_above).
  std::vector<ValueId> gemm_biases;
  if (options.gemm_bias_rows_above > 0)
    for (ValueId id = 0; id < n; ++id)
      if (!mat[id] && is_long_gemm_bias(g, consumers, id, options.gemm_bias_rows_above)) {
        mat[id] = true;
        gemm_biases.push_back(id);
      }
  // GELU's pre-activation, stored for GELU_AUX_BIAS (FusionOptions::gemm_gelu_pre_activation).
  if (options.gemm_gelu_pre_activation)
    for (ValueId id = 0; id < n; ++id)
      if (!mat[id] && is_gemm_bias(g, id) && feeds_tanh(g, consumers, id, 5) &&
          kernels_inlining(consumers, mat, id).size() > 1) {
        mat[id] = true;
        gemm_biases.push_back(id);
      }
  if (options.rematerialize) {
    // GEMM and attention operands are read from their buffers: those stay stored, as do the
    // biases kept for a GEMM's epilogue.
    std::vector<bool> pinned(n, false);
    for (ValueId id : gemm_biases)
      pinned[id] = true;
    for (ValueId id = 0; id < n; ++id) {
      OpId op = g.node(id).op;
      if (op != OpId::matmul && !is_fused_attention(op) && !is_collective(op)) continue;
      for (ValueId in : g.node(id).inputs) {
        while (!mat[in] && is_view_op(g.node(in).op))
          in = g.node(in).inputs[0];
        pinned[in] = true;
      }
    }
    rematerialize(g, mat, is_output, pinned);
  }
  return mat;
}

/// The kernel that computes the stored value `id`: its inlined body (everything reachable
/// without crossing a buffer) and the buffers it reads.
Kernel kernel_rooted_at(const FusionPlan& plan, ValueId id) {
  const Graph& g = *plan.graph;
  const std::vector<bool>& mat = plan.materialized;
  Kernel k;
  k.root = id;
  k.kind = kind_of(g.node(id).op);
  std::vector<bool> seen(g.size(), false);
  std::vector<ValueId> stack{id};
  seen[id] = true;
  while (!stack.empty()) {
    ValueId v = stack.back();
    stack.pop_back();
    k.body.push_back(v);
    if (k.kind == KernelKind::attention || k.kind == KernelKind::collective) {
      for (ValueId in : g.node(v).inputs) {
        // A strided attention operand (FusionOptions::attention_operand_views): its chain of
        // views is the kernel's own index arithmetic, and the buffer under it what it reads.
        while (!mat[in] && plan.view_of[in] == in) {
          k.body.push_back(in);
          in = g.node(in).inputs[0];
        }
        if (std::find(k.reads.begin(), k.reads.end(), plan.view_of[in]) == k.reads.end())
          k.reads.push_back(plan.view_of[in]);
      }
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
  return k;
}

} // namespace

FusionPlan fuse(const Graph& g, FusionOptions options) {
  std::size_t n = g.size();
  FusionPlan plan;
  plan.graph = &g;
  plan.materialized = stored_values(g, options);
  plan.view_of.resize(n);
  for (ValueId id = 0; id < n; ++id)
    plan.view_of[id] = id;
  // Reshapes of buffers are views: no kernel, no memory, the same flat order.
  for (ValueId id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    if (node.op == OpId::reshape) {
      ValueId src = plan.view_of[node.inputs[0]];
      if (plan.materialized[src]) plan.view_of[id] = src;
    }
  }
  std::vector<bool> is_output(n, false);
  for (const NamedValue& out : g.outputs())
    is_output[out.id] = true;
  for (ValueId id = 0; id < n; ++id) {
    if (!plan.materialized[id] || g.node(id).op == OpId::input) continue;
    if (plan.view_of[id] != id && !is_output[id]) continue; // a view of another buffer
    plan.kernels.push_back(kernel_rooted_at(plan, id));
  }
  merge_attention_kernels(plan);
  if (options.row_kernels) merge_into_row_kernels(plan);
  merge_sibling_kernels(plan, options.sibling_reductions, options.scalar_sibling_max_elements);
  if (options.row_kernels && options.row_partial_max_values > 0)
    merge_column_partials(plan, options);
  if (options.row_kernels) merge_row_reductions(plan);
  if (options.row_kernels) join_row_kernels(plan);
  drop_unread_outputs(plan);
  hoist_collectives(plan);
  choose_in_place(plan);
  if (options.store_over_donated_inputs) store_over_donated_inputs(plan);
  return plan;
}

std::string FusionPlan::print() const {
  std::ostringstream os;
  os << "fusion: " << kernels.size() << " kernels\n";
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const Kernel& k = kernels[i];
    os << "  kernel " << i << " " << kernel_kind_name(k.kind) << " -> %" << k.root << " "
       << to_string(graph->type(k.root));
    for (ValueId extra : k.extra_outputs)
      os << ", %" << extra << " " << to_string(graph->type(extra));
    os << "\n    body:";
    for (ValueId v : k.body)
      os << " %" << v << ":" << op_name(graph->node(v).op);
    if (k.in_place()) os << "  (in place over %" << k.overwrites << ")";
    for (auto [out, in] : k.over_inputs)
      os << "  (%" << out << " over input %" << in << ")";
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
