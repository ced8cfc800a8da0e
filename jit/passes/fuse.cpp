// jit/passes/fuse.cpp — materialisation decisions and kernel grouping for the lowered graph
#include "jit/passes/fuse.hpp"
#include "jit/passes/passes.hpp"

#include "ops/registry.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace sinter {

namespace {

/// Ops that only move or pick elements: recomputing them in each consumer costs no arithmetic.
bool index_only(OpId op) { return op_def(op).fusion == FusionCost::index_only; }

/// One cheap instruction per element: worth recomputing rather than storing and reloading.
bool cheap_elementwise(OpId op) { return op_def(op).fusion == FusionCost::cheap; }

/// The kernel a node of `op` makes when it is a kernel's root.
KernelKind kind_of(OpId op) { return op_def(op).kernel_kind; }

/// Reductions, GEMMs, scatters, attention and collectives: never inlined into another kernel.
bool always_root(OpId op) { return kind_of(op) != KernelKind::loop; }

bool swaps_last_two(const Node& n) {
  const auto& perm = n.attrs.ints;
  std::size_t r = perm.size();
  if (r < 2) return false;
  for (std::size_t i = 0; i + 2 < r; ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return perm[r - 2] == static_cast<int64_t>(r - 1) && perm[r - 1] == static_cast<int64_t>(r - 2);
}

const char* kind_name(KernelKind k) {
  switch (k) {
  case KernelKind::loop: return "loop";
  case KernelKind::reduce: return "reduce";
  case KernelKind::gemm: return "gemm";
  case KernelKind::scatter_add: return "scatter_add";
  case KernelKind::row: return "row";
  case KernelKind::attention: return "attention";
  case KernelKind::collective: return "collective";
  }
  return "?";
}

} // namespace

bool is_fused_attention(OpId op) { return kind_of(op) == KernelKind::attention; }
bool is_collective(OpId op) { return kind_of(op) == KernelKind::collective; }

std::vector<std::size_t> collective_waits(const FusionPlan& plan) {
  const auto& kernels = plan.kernels;
  std::vector<std::size_t> wait(kernels.size());
  for (std::size_t k = 0; k < kernels.size(); ++k) {
    wait[k] = k;
    if (kernels[k].kind != KernelKind::collective) continue;
    wait[k] = kernels.size();
    for (std::size_t later = k + 1; later < kernels.size() && wait[k] == kernels.size(); ++later)
      for (ValueId r : kernels[later].reads)
        if (kernels[k].writes(r)) {
          wait[k] = later;
          break;
        }
  }
  return wait;
}

std::vector<std::size_t> buffer_last_use(const FusionPlan& plan) {
  std::vector<std::size_t> wait = collective_waits(plan);
  std::vector<std::size_t> last(plan.graph->size(), 0);
  for (std::size_t k = 0; k < plan.kernels.size(); ++k)
    for (ValueId r : plan.kernels[k].reads)
      last[r] = std::max(last[r], wait[k]);
  return last;
}

bool has_fused_attention(const Graph& g) {
  for (ValueId id = 0; id < g.size(); ++id)
    if (is_fused_attention(g.node(id).op)) return true;
  return false;
}

namespace {

/// Removes the kernels marked as merged into others, keeping the order of the rest.
void drop_merged(std::vector<Kernel>& kernels, const std::vector<bool>& merged) {
  std::vector<Kernel> kept;
  for (std::size_t k = 0; k < kernels.size(); ++k)
    if (!merged[k]) kept.push_back(std::move(kernels[k]));
  kernels = std::move(kept);
}

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
    bool in_memory = plan.loads(k, v);
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

/// Whether two kernels walk the same iteration space, so one pass can compute both: loops over
/// one shape, or (with `reductions`) reductions over the same axes of same-shaped operands.
bool same_pass(const Graph& g, const Kernel& a, const Kernel& b, bool reductions) {
  if (a.kind != b.kind) return false;
  if (a.kind == KernelKind::loop) return g.type(a.root).shape == g.type(b.root).shape;
  if (a.kind != KernelKind::reduce || !reductions) return false;
  const Node &x = g.node(a.root), &y = g.node(b.root);
  return x.type.shape == y.type.shape && x.attrs.ints == y.attrs.ints &&
         g.type(x.inputs[0]).shape == g.type(y.inputs[0]).shape;
}

/// Merges loop kernels over one shape into a single pass with several outputs: kernel j joins
/// an earlier kernel i when everything j reads exists by the time i runs (written before i, or
/// by i itself and then read only at the element being written), and the two share a read
/// buffer or j reads what i writes; or i moves down into j when no kernel in between reads
/// what i writes. Saves a pass over shared inputs and a round trip through
/// memory: AdamW's m, v and parameter updates become one kernel, a cast joins its producer.
/// With `reductions`, sibling reductions (a bias's and a layernorm's γ and β gradients, column
/// sums over the same rows) merge the same way, except that one never reads the other.
void merge_sibling_kernels(FusionPlan& plan, bool reductions) {
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
    if (late.kind != KernelKind::loop && !(reductions && late.kind == KernelKind::reduce)) continue;
    // A reduction's outputs are complete only at its end: nothing reads them during the pass.
    std::vector<ValueId> aligned;
    if (late.kind == KernelKind::loop) aligned = aligned_reads(plan, late);
    std::size_t looked_at = 0; // kernels that still exist, counted towards the window
    for (std::size_t i = j; i-- > 0 && looked_at < merge_window;) {
      if (merged[i]) continue;
      ++looked_at;
      Kernel& early = kernels[i];
      if (!same_pass(g, early, late, reductions)) continue;
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
      // A value computed a second time runs late on purpose (its first copy died early).
      if (ready_at_early && g.recomputed(late.root)) continue;
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
  drop_merged(kernels, merged);
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
  drop_merged(kernels, merged);
}

/// A row kernel's shape: `rows` rows of `length` elements along the last axis.
struct RowGeometry {
  int64_t rows = 0, length = 0;
  bool full_row(const Shape& s) const {
    return !s.empty() && s.back() == length && numel(s) == rows * length;
  }
  bool per_row(const Shape& s) const { return numel(s) == rows; }
};

bool is_row_reduction(const Graph& g, ValueId v) {
  const Node& n = g.node(v);
  if (kind_of(n.op) != KernelKind::reduce) return false;
  std::size_t rank = g.type(n.inputs[0]).shape.size();
  return rank >= 1 && n.attrs.ints.size() == 1 && n.attrs.ints[0] == static_cast<int64_t>(rank) - 1;
}

/// Whether computing `kernel` row by row is sound: every reduction in its body is reached from
/// the outputs (and from later reductions' operands) only through ops that keep the row, so
/// the one value computed per row is the one every use asks for.
bool rows_stay_aligned(const FusionPlan& plan, const Kernel& kernel, const RowGeometry& geo) {
  const Graph& g = *plan.graph;
  std::vector<std::pair<ValueId, bool>> stack;
  for (ValueId out : kernel.outputs())
    stack.push_back({out, true});
  std::set<std::pair<ValueId, bool>> seen;
  while (!stack.empty()) {
    auto [v, aligned] = stack.back();
    stack.pop_back();
    if (!seen.insert({v, aligned}).second) continue;
    const Node& n = g.node(v);
    if (plan.loads(kernel, v)) continue;
    if (n.op == OpId::input) continue;
    if (is_row_reduction(g, v)) {
      if (!aligned || !geo.full_row(g.type(n.inputs[0]).shape)) return false;
      stack.push_back({n.inputs[0], true}); // its operand is read along this row
      continue;
    }
    if (always_root(n.op)) return false; // another kind of reduction, a GEMM, ...
    const Shape& shape = g.type(v).shape;
    bool keeps_row = aligned && (geo.full_row(shape) || geo.per_row(shape));
    if (keeps_row && n.op == OpId::broadcast) {
      const Shape& in = g.type(n.inputs[0]).shape;
      // Only the last axis may be broadcast ([rows..., 1] -> [rows..., N]).
      keeps_row = in.size() == shape.size() && geo.per_row(in) &&
                  std::equal(in.begin(), in.end() - 1, shape.begin());
    } else if (keeps_row && n.op == OpId::reshape) {
      const Shape& in = g.type(n.inputs[0]).shape;
      keeps_row =
          (geo.full_row(in) && geo.full_row(shape)) || (geo.per_row(in) && geo.per_row(shape));
    } else if (keeps_row) {
      keeps_row = !index_only(n.op);
    }
    for (ValueId in : n.inputs)
      stack.push_back({in, keeps_row});
  }
  return true;
}

/// Turns loop kernels into row kernels: a loop over rows of `length` elements takes in the
/// last-axis reductions it reads (layernorm's mean and variance, softmax's max and sum) and the
/// kernels between them, when they can move down to it and every use keeps to its row. A value
/// nothing else reads stops being stored; one still read elsewhere becomes another output.
void merge_into_row_kernels(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  auto& kernels = plan.kernels;
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::vector<bool> is_output(g.size(), false);
  for (const NamedValue& out : g.outputs())
    is_output[out.id] = true;
  std::vector<bool> merged(kernels.size(), false);
  auto writer_of = [&](ValueId buffer) {
    for (std::size_t k = 0; k < kernels.size(); ++k)
      if (!merged[k] && kernels[k].writes(buffer)) return k;
    return none;
  };
  auto read_by_other = [&](ValueId buffer, std::size_t except_a, std::size_t except_b) {
    if (is_output[buffer]) return true;
    for (std::size_t k = 0; k < kernels.size(); ++k)
      if (!merged[k] && k != except_a && k != except_b &&
          std::find(kernels[k].reads.begin(), kernels[k].reads.end(), buffer) !=
              kernels[k].reads.end())
        return true;
    return false;
  };
  // A loop that only reads per-row values can join once their producer became a row kernel:
  // a few passes, latest kernels first in each.
  bool changed = true;
  for (int pass = 0; pass < 4 && changed; ++pass) {
    changed = false;
    for (std::size_t l = kernels.size(); l-- > 0;) {
      if (merged[l] || kernels[l].kind != KernelKind::loop) continue;
      // Undone at the end when no reduction joined (then it is no row kernel).
      Kernel original = kernels[l];
      std::vector<bool> original_merged = merged;
      std::vector<bool> original_materialized = plan.materialized;
      std::vector<ValueId> original_view_of = plan.view_of;
      RowGeometry geo;
      bool grew = true;
      while (grew) {
        grew = false;
        Kernel& row = kernels[l];
        for (ValueId buffer : std::vector<ValueId>(row.reads)) {
          std::size_t p = writer_of(buffer);
          if (p == none || p >= l) continue;
          Kernel& producer = kernels[p];
          RowGeometry trial = geo;
          const Shape& root = g.type(row.root).shape;
          if (trial.rows == 0 && producer.kind == KernelKind::reduce &&
              is_row_reduction(g, producer.root)) { // rows of the reduction
            const Shape& operand = g.type(g.node(producer.root).inputs[0]).shape;
            trial = {numel(g.type(producer.root).shape), operand.back()};
          } else if (trial.rows == 0 && producer.kind == KernelKind::row) { // rows of that kernel
            ValueId first = row_reductions(g, producer).front();
            trial = {numel(g.type(first).shape), g.type(g.node(first).inputs[0]).shape.back()};
          } else if (trial.rows == 0 && !root.empty() && root.back() > 1) { // rows of the root
            trial = {numel(root) / root.back(), root.back()};
          }
          if (trial.rows == 0 || (!trial.full_row(root) && !trial.per_row(root))) continue;
          bool fits = false;
          if (producer.kind == KernelKind::reduce)
            fits = is_row_reduction(g, producer.root) &&
                   trial.full_row(g.type(g.node(producer.root).inputs[0]).shape);
          else if (producer.kind == KernelKind::row)
            fits =
                trial.full_row(g.type(g.node(row_reductions(g, producer).front()).inputs[0]).shape);
          else
            fits = producer.kind == KernelKind::loop;
          for (ValueId out : producer.outputs())
            fits = fits && (trial.full_row(g.type(out).shape) || trial.per_row(g.type(out).shape));
          // It moves down to the row kernel: nothing in between may read what it writes.
          for (std::size_t k = p + 1; fits && k < l; ++k)
            if (!merged[k])
              for (ValueId r : kernels[k].reads)
                fits = fits && !producer.writes(r);
          if (!fits) continue;
          Kernel candidate = row;
          std::vector<ValueId> internal;
          for (ValueId out : producer.outputs()) {
            if (read_by_other(out, p, l))
              candidate.extra_outputs.push_back(out);
            else
              internal.push_back(out);
          }
          std::vector<bool> saved_materialized = plan.materialized;
          std::vector<ValueId> saved_view_of = plan.view_of;
          for (ValueId v : internal) {
            plan.materialized[v] = false;
            for (ValueId id = 0; id < g.size(); ++id)
              if (plan.view_of[id] == v) plan.view_of[id] = id;
          }
          candidate.kind = KernelKind::row;
          candidate.body.insert(candidate.body.end(), producer.body.begin(), producer.body.end());
          std::sort(candidate.body.begin(), candidate.body.end());
          candidate.body.erase(std::unique(candidate.body.begin(), candidate.body.end()),
                               candidate.body.end());
          for (ValueId r : producer.reads)
            if (std::find(candidate.reads.begin(), candidate.reads.end(), r) ==
                candidate.reads.end())
              candidate.reads.push_back(r);
          std::erase_if(candidate.reads, [&](ValueId r) {
            return candidate.writes(r) ||
                   std::find(internal.begin(), internal.end(), r) != internal.end();
          });
          if (!rows_stay_aligned(plan, candidate, trial)) {
            plan.materialized = std::move(saved_materialized);
            plan.view_of = std::move(saved_view_of);
            continue;
          }
          row = std::move(candidate);
          geo = trial;
          merged[p] = true;
          grew = true;
          break;
        }
      }
      if (kernels[l].kind == KernelKind::row && row_reductions(g, kernels[l]).empty()) {
        kernels[l] = std::move(original);
        merged = std::move(original_merged);
        plan.materialized = std::move(original_materialized);
        plan.view_of = std::move(original_view_of);
      }
      changed = changed || kernels[l].kind == KernelKind::row;
    }
  }
  drop_merged(kernels, merged);
}

/// Moves each collective, and each loop kernel that only feeds collectives (a gradient bucket
/// being packed), up to right after the kernels that write what it reads: a bucket's reduction
/// then starts as soon as its last gradient exists and runs under the rest of the backward
/// pass. Every rank compiles the same graph, so every rank starts its collectives in the same
/// order.
void hoist_collectives(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  if (std::none_of(plan.kernels.begin(), plan.kernels.end(),
                   [](const Kernel& k) { return k.kind == KernelKind::collective; }))
    return;
  std::vector<bool> is_output(g.size(), false);
  for (const NamedValue& out : g.outputs())
    is_output[out.id] = true;
  std::vector<std::vector<const Kernel*>> readers(g.size());
  for (const Kernel& k : plan.kernels)
    for (ValueId r : k.reads)
      readers[r].push_back(&k);
  auto feeds_only_collectives = [&](const Kernel& k) {
    if (k.kind != KernelKind::loop) return false;
    for (ValueId out : k.outputs()) {
      if (is_output[out] || readers[out].empty()) return false;
      for (const Kernel* reader : readers[out])
        if (reader->kind != KernelKind::collective) return false;
    }
    return true;
  };
  std::vector<Kernel> order;
  std::vector<std::ptrdiff_t> written_at(g.size(), -1); // buffer -> position in `order`
  for (Kernel& k : plan.kernels) {
    std::ptrdiff_t at = static_cast<std::ptrdiff_t>(order.size());
    if (k.kind == KernelKind::collective || feeds_only_collectives(k)) {
      at = 0;
      for (ValueId r : k.reads)
        at = std::max(at, written_at[r] + 1);
    }
    for (std::ptrdiff_t& position : written_at)
      if (position >= at) ++position;
    for (ValueId out : k.outputs())
      written_at[out] = at;
    order.insert(order.begin() + at, std::move(k));
  }
  plan.kernels = std::move(order);
}

/// Lets each loop kernel write over a buffer that dies in it, when that is safe.
void choose_in_place(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  std::vector<bool> is_output(g.size(), false);
  for (const NamedValue& out : g.outputs())
    is_output[out.id] = true;
  // A collective still reads its operands until its wait point: nothing writes over them first.
  std::vector<std::size_t> last_use = buffer_last_use(plan);
  std::vector<bool> taken(g.size(), false); // one kernel writes over a buffer at most once
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    Kernel& kernel = plan.kernels[k];
    kernel.overwrites = kernel.root;
    if (kernel.kind == KernelKind::collective && !is_output[kernel.root]) {
      // A sum or broadcast runs in place (MPI_IN_PLACE) over an operand that dies in it.
      OpId op = g.node(kernel.root).op;
      ValueId r = kernel.reads[0];
      if ((op == OpId::all_reduce || op == OpId::broadcast_from) &&
          r == g.node(kernel.root).inputs[0] && g.node(r).op != OpId::input && !is_output[r] &&
          !taken[r] && plan.materialized[r] &&
          std::none_of(plan.kernels.begin() + static_cast<std::ptrdiff_t>(k) + 1,
                       plan.kernels.end(), [&](const Kernel& other) {
                         return std::find(other.reads.begin(), other.reads.end(), r) !=
                                other.reads.end();
                       })) {
        kernel.overwrites = r;
        taken[r] = true;
      }
      continue;
    }
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

/// Stops storing values that are cheap to recompute from buffers which are alive anyway, or
/// whose longer life costs fewer bytes than the value: each kernel that read the value computes
/// it again from those buffers. A buffer kept longer is kept only over part of the value's own
/// life (it was read when the value was computed), so at every point of the step fewer bytes
/// are alive. The cases it exists for are the backward pass's: GELU's tanh and x², stored by the
/// forward kernel for the gradient, recomputed from the GEMM output the gradient reads anyway
/// (PyTorch keeps GELU's input alone, too); a layer norm's centred f32 input, recomputed from
/// the bf16 residual stream and the row means. Kernels run in the order of their roots, so a
/// buffer's last reader is its highest-numbered reader.
void rematerialize(const Graph& g, std::vector<bool>& mat, const std::vector<bool>& is_output,
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

FusionPlan fuse(const Graph& g, FusionOptions options) {
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
  for (ValueId id = 0; id < n; ++id) {
    if (is_fused_attention(g.node(id).op)) { // the kernel reads contiguous operands
      for (ValueId in : g.node(id).inputs)
        if (!in_buffer(in)) mat[in] = true;
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
  if (options.rematerialize) {
    // GEMM and attention operands are read from their buffers: those stay stored.
    std::vector<bool> pinned(n, false);
    for (ValueId id = 0; id < n; ++id) {
      OpId op = g.node(id).op;
      if (op != OpId::matmul && !is_fused_attention(op) && !is_collective(op)) continue;
      for (ValueId in : g.node(id).inputs) {
        while (!mat[in] && (g.node(in).op == OpId::reshape || g.node(in).op == OpId::permute))
          in = g.node(in).inputs[0];
        pinned[in] = true;
      }
    }
    rematerialize(g, mat, is_output, pinned);
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
      if (k.kind == KernelKind::attention || k.kind == KernelKind::collective) {
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
  if (options.row_kernels) merge_into_row_kernels(plan);
  merge_sibling_kernels(plan, options.sibling_reductions);
  hoist_collectives(plan);
  choose_in_place(plan);
  return plan;
}

Graph recompute_late_gemm_operands(const Graph& g, FusionOptions options) {
  if (!options.rematerialize) return g;
  std::vector<LateOperand> late = late_gemm_operands(g, fuse(g, options));
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
  return out;
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

std::vector<ValueId> row_reductions(const Graph& g, const Kernel& kernel) {
  std::vector<ValueId> out;
  if (kernel.kind != KernelKind::row) return out;
  for (ValueId v : kernel.body) // body is in graph order: a reduction after those it uses
    if (is_row_reduction(g, v)) out.push_back(v);
  return out;
}

RowLayout row_layout(const Graph& g, const Kernel& kernel) {
  RowLayout layout;
  layout.reductions = row_reductions(g, kernel);
  if (layout.reductions.empty()) return layout;
  ValueId first = layout.reductions.front();
  layout.length = g.type(g.node(first).inputs[0]).shape.back();
  layout.rows = numel(g.type(first).shape);
  std::vector<ValueId> outputs = kernel.outputs();
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Shape& s = g.type(outputs[i]).shape;
    bool whole_rows =
        !s.empty() && s.back() == layout.length && numel(s) == layout.rows * layout.length;
    (whole_rows ? layout.full : layout.per_row).push_back(i);
  }
  return layout;
}

bool reduces_last_axis(const Graph& g, const Kernel& k) {
  const Node& root = g.node(k.root);
  std::size_t rank = g.type(root.inputs[0]).shape.size();
  return rank == 0 || std::find(root.attrs.ints.begin(), root.attrs.ints.end(),
                                static_cast<int64_t>(rank - 1)) != root.attrs.ints.end();
}

} // namespace sinter
