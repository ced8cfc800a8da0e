// jit/passes/fuse_merge.cpp — fusion's merges: sibling passes over one shape, fused attention
// families, and loop kernels that take in the reductions over their rows (row kernels)
#include "jit/passes/fuse_internal.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

namespace sinter {

using namespace fuse_steps;

namespace {

/// Removes the kernels marked as merged into others, keeping the order of the rest.
void drop_merged(std::vector<Kernel>& kernels, const std::vector<bool>& merged) {
  std::vector<Kernel> kept;
  for (std::size_t k = 0; k < kernels.size(); ++k)
    if (!merged[k]) kept.push_back(std::move(kernels[k]));
  kernels = std::move(kept);
}

/// No kernel writes the buffer (an input).
constexpr std::size_t none = static_cast<std::size_t>(-1);

/// For each buffer of the plan's graph, the index of the kernel writing it (or `none`).
std::vector<std::size_t> writers(const FusionPlan& plan) {
  std::vector<std::size_t> writer(plan.graph->size(), none);
  for (std::size_t k = 0; k < plan.kernels.size(); ++k)
    for (ValueId out : plan.kernels[k].outputs())
      writer[out] = k;
  return writer;
}

/// Earlier kernels (still standing) a loop kernel may join: bounds the search and how much
/// earlier a merged kernel's outputs come to life.
constexpr std::size_t merge_window = 32;

/// The most buffers (reads and writes) a merged sibling kernel takes. Without a bound, every
/// same-shaped optimizer update of a model merges into one kernel (they all read the learning
/// rate): GPT-2 small's [768] updates made one kernel of 550 parameters that took the PTX
/// assembler 5 s, longer than all the other kernels together on a 16-core host.
constexpr std::size_t max_merged_buffers = 128;

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

/// A row kernel's shape: `rows` rows of `length` elements along the last axis.
struct RowGeometry {
  int64_t rows = 0, length = 0;
  bool full_row(const Shape& s) const {
    return !s.empty() && s.back() == length && numel(s) == rows * length;
  }
  bool per_row(const Shape& s) const { return numel(s) == rows; }
};

/// The rows a row kernel walks: those of its first last-axis reduction.
RowGeometry row_geometry(const Graph& g, const Kernel& row_kernel) {
  ValueId first = row_reductions(g, row_kernel).front();
  return {numel(g.type(first).shape), g.type(g.node(first).inputs[0]).shape.back()};
}

/// Whether a kernel still standing strictly between positions `from` and `to` reads what
/// `moving` writes: then `moving` cannot move from one to the other.
bool read_between(const std::vector<Kernel>& kernels, const std::vector<bool>& merged,
                  std::size_t from, std::size_t to, const Kernel& moving) {
  for (std::size_t k = from + 1; k < to; ++k)
    if (!merged[k])
      for (ValueId r : kernels[k].reads)
        if (moving.writes(r)) return true;
  return false;
}

/// `from`'s outputs, reads and body become `into`'s too: one pass computes both.
void absorb(Kernel& into, const Kernel& from) {
  for (ValueId out : from.outputs())
    into.extra_outputs.push_back(out);
  for (ValueId r : from.reads)
    if (!into.writes(r) && std::find(into.reads.begin(), into.reads.end(), r) == into.reads.end())
      into.reads.push_back(r);
  std::erase_if(into.reads, [&](ValueId r) { return into.writes(r); });
  into.body.insert(into.body.end(), from.body.begin(), from.body.end());
  std::sort(into.body.begin(), into.body.end());
  into.body.erase(std::unique(into.body.begin(), into.body.end()), into.body.end());
}

/// Whether `v` holds column sums over groups of a row kernel's rows (RowLayout::partials): a
/// reduce_sum over axis 1 of [groups, group, length] whose groups × group rows are `geo`'s.
bool is_column_partial(const Graph& g, ValueId v, const RowGeometry& geo) {
  const Node& n = g.node(v);
  if (n.op != OpId::reduce_sum || n.attrs.ints != std::vector<int64_t>{1}) return false;
  const Shape& xs = g.type(n.inputs[0]).shape;
  return xs.size() == 3 && xs[2] == geo.length && xs[0] * xs[1] == geo.rows;
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
    if (kernel.writes(v) && is_column_partial(g, v, geo)) {
      // Summed over its group as each row is computed: its operand is read along the row.
      stack.push_back({n.inputs[0], true});
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

} // namespace

namespace {

/// The buffers kernel `k` loads on the paths down from `stack` (each value with whether it is
/// computed at the element the root is written to), those read only at that element: with
/// the root's shape, through elementwise ops alone. A path ends at a value `stop` names.
std::vector<ValueId> buffers_read_at_element(const FusionPlan& plan, const Kernel& k,
                                             std::vector<std::pair<ValueId, bool>> stack,
                                             const std::function<bool(ValueId)>& stop) {
  const Graph& g = *plan.graph;
  std::map<ValueId, bool> aligned; // buffer -> every access aligned so far
  std::set<std::pair<ValueId, bool>> seen;
  const Shape& root_shape = g.type(k.root).shape;
  while (!stack.empty()) {
    auto [v, at_element] = stack.back();
    stack.pop_back();
    if (!seen.insert({v, at_element}).second) continue;
    if (plan.loads(k, v)) {
      bool ok = at_element && g.type(v).shape == root_shape;
      auto [it, inserted] = aligned.emplace(plan.view_of[v], ok);
      if (!inserted) it->second = it->second && ok;
      continue;
    }
    if (stop(v)) continue;
    OpId op = g.node(v).op;
    bool elementwise = op != OpId::input && is_primitive(op) && !index_only(op) && !always_root(op);
    for (ValueId in : g.node(v).inputs)
      stack.push_back({in, at_element && elementwise});
  }
  std::vector<ValueId> out;
  for (auto [buffer, ok] : aligned)
    if (ok) out.push_back(buffer);
  return out;
}

} // namespace

/// Buffers a loop kernel reads only at the index it writes (through elementwise ops alone).
std::vector<ValueId> fuse_steps::aligned_reads(const FusionPlan& plan, const Kernel& k) {
  std::vector<std::pair<ValueId, bool>> starts;
  for (ValueId out : k.outputs())
    starts.push_back({out, true});
  return buffers_read_at_element(plan, k, std::move(starts), [](ValueId) { return false; });
}

/// Buffers a row kernel reads only at the element its root is written to (through
/// elementwise ops) or through its row reductions, whose passes over the row all end before
/// its elements are written (the schedules: the reductions, then the row's elements, then the
/// per-row values): buffers the root may be written over. None with column partials, which
/// read the row as its elements are written.
std::vector<ValueId> fuse_steps::row_overwritable_reads(const FusionPlan& plan, const Kernel& k) {
  const Graph& g = *plan.graph;
  RowLayout layout = row_layout(g, k);
  if (k.kind != KernelKind::row || !layout.partials.empty() || layout.full.empty() ||
      layout.full.front() != 0)
    return {};
  std::vector<ValueId> outputs = k.outputs();
  std::vector<std::pair<ValueId, bool>> starts;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    starts.push_back(
        {outputs[i], std::find(layout.full.begin(), layout.full.end(), i) != layout.full.end()});
  return buffers_read_at_element(plan, k, std::move(starts),
                                 [&](ValueId v) { return is_row_reduction(g, v); });
}

/// Merges loop kernels over one shape into a single pass with several outputs: kernel j joins
/// an earlier kernel i when everything j reads exists by the time i runs (written before i, or
/// by i itself and then read only at the element being written), and the two share a read
/// buffer or j reads what i writes; or i moves down into j when no kernel in between reads
/// what i writes. Saves a pass over shared inputs and a round trip through
/// memory: AdamW's m, v and parameter updates become one kernel, a cast joins its producer.
/// With `reductions`, sibling reductions (a bias's and a layernorm's γ and β gradients, column
/// sums over the same rows, or of buffers one kernel wrote) merge the same way, except that one
/// never reads the other.
void fuse_steps::merge_sibling_kernels(FusionPlan& plan, bool reductions,
                                       int64_t scalar_sibling_max_elements) {
  const Graph& g = *plan.graph;
  auto& kernels = plan.kernels;
  std::vector<std::size_t> writer = writers(plan);
  std::vector<bool> merged(kernels.size(), false);
  std::vector<bool> is_output(g.size(), false);
  for (const NamedValue& out : g.outputs())
    is_output[out.id] = true;
  for (std::size_t j = 0; j < kernels.size(); ++j) {
    const Kernel& late = kernels[j];
    if (late.kind != KernelKind::loop && !(reductions && late.kind == KernelKind::reduce)) continue;
    // A reduction's outputs are complete only at its end: nothing reads them during the pass.
    std::vector<ValueId> aligned;
    if (late.kind == KernelKind::loop) aligned = aligned_reads(plan, late);
    // A pass that writes only step outputs (which live to the end of the step anyway: AMP's
    // working copies, cast from the updated weights) may also join the kernel that writes what
    // it reads, however far back (the updates of many parameters come between).
    std::vector<ValueId> written = late.outputs();
    bool outputs_only =
        std::all_of(written.begin(), written.end(), [&](ValueId v) { return is_output[v]; });
    auto producer = [&](std::size_t i) {
      return outputs_only && std::any_of(late.reads.begin(), late.reads.end(),
                                         [&](ValueId r) { return writer[r] == i; });
    };
    // A shared scalar (a learning rate) relates small passes only.
    const bool large = scalar_sibling_max_elements > 0 &&
                       numel(g.type(late.root).shape) > scalar_sibling_max_elements;
    std::size_t looked_at = 0; // kernels that still exist, counted towards the window
    for (std::size_t i = j; i-- > 0;) {
      if (merged[i]) continue;
      if (looked_at++ >= merge_window && !producer(i)) {
        if (!outputs_only) break;
        continue;
      }
      Kernel& early = kernels[i];
      if (!same_pass(g, early, late, reductions)) continue;
      bool aligned_ok = true, ready_at_early = true, related = false;
      for (ValueId r : late.reads) {
        if (early.writes(r)) {
          related = true;
          aligned_ok &= std::find(aligned.begin(), aligned.end(), r) != aligned.end();
        } else {
          ready_at_early &= writer[r] == none || writer[r] < i;
          related |= std::find(early.reads.begin(), early.reads.end(), r) != early.reads.end() &&
                     (!large || numel(g.type(r).shape) > 1);
          // Reductions of outputs of one kernel (the sums of a layernorm's γ and β partials).
          if (late.kind == KernelKind::reduce && writer[r] != none)
            related |= std::any_of(early.reads.begin(), early.reads.end(),
                                   [&](ValueId e) { return writer[e] == writer[r]; });
        }
      }
      if (!aligned_ok || !related) continue;
      // The buffers the merged kernel would take, each counted once. A working copy cast from
      // what the early kernel writes adds a store and no load: it always joins, or the updates
      // merged up to the bound would leave each bias's copy a launch of its own.
      std::size_t added = late.outputs().size();
      bool early_writes_all = true;
      for (ValueId r : late.reads) {
        bool written_early = early.writes(r);
        early_writes_all = early_writes_all && written_early;
        added += !written_early &&
                 std::find(early.reads.begin(), early.reads.end(), r) == early.reads.end();
      }
      bool copy_of_early = outputs_only && early_writes_all;
      if (!copy_of_early &&
          early.reads.size() + early.outputs().size() + added > max_merged_buffers)
        continue;
      // Otherwise the early kernel may move down to the late one, if nothing in between reads
      // what it writes.
      bool movable = !ready_at_early && !read_between(kernels, merged, i, j, early);
      if (!ready_at_early && !movable) continue;
      // A value computed a second time runs late on purpose (its first copy died early).
      if (ready_at_early && g.recomputed(late.root)) continue;
      Kernel& into = ready_at_early ? early : kernels[j];
      const Kernel& from = ready_at_early ? kernels[j] : early;
      std::size_t target = ready_at_early ? i : j;
      for (ValueId out : from.outputs())
        writer[out] = target;
      absorb(into, from);
      merged[ready_at_early ? j : i] = true;
      break;
    }
  }
  drop_merged(kernels, merged);
}

/// The fused attention ops over the same operands become one kernel: the forward takes its
/// log-sum-exp (which autodiff adds later) and the three gradients share one pass over the
/// scores. Each joins the first such kernel, which runs after all of its operands exist.
void fuse_steps::merge_attention_kernels(FusionPlan& plan) {
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

/// Turns loop kernels into row kernels: a loop over rows of `length` elements takes in the
/// last-axis reductions it reads (layernorm's mean and variance, softmax's max and sum) and the
/// kernels between them, when they can move down to it and every use keeps to its row. A value
/// nothing else reads stops being stored; one still read elsewhere becomes another output.
void fuse_steps::merge_into_row_kernels(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  auto& kernels = plan.kernels;
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
            trial = row_geometry(g, producer);
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
          fits = fits && !read_between(kernels, merged, p, l, producer);
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
          for (ValueId v : internal)
            stop_storing(plan, v);
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

/// A reduction over the rows of a row kernel that reads one of the same buffers joins it as one
/// more value per row, when it can move down to the row kernel (nothing in between reads it):
/// the cross-entropy's picked logit (the sum of logits × one-hot) is then found in the pass
/// that computes the log-sum-exp, and the logits are read once, not twice.
void fuse_steps::merge_row_reductions(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  auto& kernels = plan.kernels;
  std::vector<bool> merged(kernels.size(), false);
  for (std::size_t r = 0; r < kernels.size(); ++r) {
    const Kernel& reduction = kernels[r];
    if (reduction.kind != KernelKind::reduce || !is_row_reduction(g, reduction.root) ||
        g.recomputed(reduction.root))
      continue;
    const Shape& operand = g.type(g.node(reduction.root).inputs[0]).shape;
    for (std::size_t l = r + 1; l < kernels.size() && l <= r + merge_window; ++l) {
      if (merged[l] || kernels[l].kind != KernelKind::row) continue;
      Kernel& row = kernels[l];
      RowGeometry geo = row_geometry(g, row);
      bool fits = geo.full_row(operand) && row.reads.size() + reduction.reads.size() +
                                                   row.outputs().size() +
                                                   reduction.outputs().size() <=
                                               max_merged_buffers;
      for (ValueId out : reduction.outputs())
        fits = fits && geo.per_row(g.type(out).shape);
      bool shares_read = false;
      for (ValueId read : reduction.reads)
        shares_read |= std::find(row.reads.begin(), row.reads.end(), read) != row.reads.end();
      // Moving down past the kernels in between: none of them may read what it writes.
      fits = fits && !read_between(kernels, merged, r, l, reduction);
      if (!fits || !shares_read) continue;
      Kernel candidate = row;
      absorb(candidate, reduction);
      if (!rows_stay_aligned(plan, candidate, geo)) continue;
      row = std::move(candidate);
      merged[r] = true;
      break;
    }
  }
  drop_merged(kernels, merged);
}

/// Column sums split into groups of rows (split_column_reductions with
/// ColumnSplitOptions::row_groups) join the row kernel over the same rows that reads one of the
/// same buffers: each group is summed by the block that computes its rows, as it computes them
/// (a layernorm backward's γ and β gradients from the pass over dy and x̂ that makes dx), and
/// only the short sum over the groups stays a kernel. The partial moves down to the row kernel
/// when nothing in between reads it, or the row kernel up to the partial when everything it
/// reads exists by then (the sums over the groups read the partials right after they are made).
void fuse_steps::merge_column_partials(FusionPlan& plan, const FusionOptions& options) {
  const Graph& g = *plan.graph;
  auto& kernels = plan.kernels;
  std::vector<std::size_t> writer = writers(plan);
  std::vector<bool> merged(kernels.size(), false);
  for (std::size_t p = 0; p < kernels.size(); ++p) {
    if (merged[p] || kernels[p].kind != KernelKind::reduce || g.recomputed(kernels[p].root))
      continue;
    const Kernel& partial = kernels[p];
    const Shape& xs = g.type(g.node(partial.root).inputs[0]).shape;
    if (xs.size() != 3 || xs[0] > options.row_partial_max_groups ||
        (xs[0] < options.row_partial_min_groups && xs[1] != options.row_partial_group_rows))
      continue;
    RowGeometry geo{xs[0] * xs[1], xs[2]};
    bool every_output_partial = true;
    for (ValueId out : partial.outputs())
      every_output_partial = every_output_partial && is_column_partial(g, out, geo) &&
                             g.type(g.node(out).inputs[0]).shape == xs &&
                             g.type(out).dtype == DType::f32;
    if (!every_output_partial) continue;
    for (std::size_t l = p + 1; l < kernels.size() && l <= p + merge_window; ++l) {
      if (merged[l] || kernels[l].kind != KernelKind::row) continue;
      const Kernel& row = kernels[l];
      RowGeometry row_geo = row_geometry(g, row);
      if (row_geo.rows != geo.rows || row_geo.length != geo.length) continue;
      // One group size a kernel, and room for every partial's values of a row.
      RowLayout layout = row_layout(g, row);
      if ((!layout.partials.empty() && layout.group != xs[1]) ||
          static_cast<int64_t>(layout.partials.size() + partial.outputs().size()) * xs[2] >
              options.row_partial_max_values)
        continue;
      bool shares_read = false;
      for (ValueId read : partial.reads)
        shares_read |= std::find(row.reads.begin(), row.reads.end(), read) != row.reads.end();
      if (!shares_read || row.reads.size() + partial.reads.size() + row.outputs().size() +
                                  partial.outputs().size() >
                              max_merged_buffers)
        continue;
      bool down = !read_between(kernels, merged, p, l, partial), up = true;
      for (ValueId read : row.reads)
        up = up && (writer[read] == none || writer[read] < p);
      if (!down && !up) continue;
      Kernel candidate = row;
      absorb(candidate, partial);
      if (!rows_stay_aligned(plan, candidate, row_geo)) continue;
      std::size_t into = down ? l : p;
      for (ValueId out : candidate.outputs())
        writer[out] = into;
      kernels[into] = std::move(candidate);
      merged[down ? p : l] = true;
      break;
    }
  }
  drop_merged(kernels, merged);
}

/// A loop kernel of elementwise ops (and reshapes) over full rows that reads a row kernel's
/// outputs joins that row kernel as further outputs, when everything else it reads exists by
/// the time the row kernel runs: under AMP the cast of an f32 gradient for the next GEMM is
/// then written by the pass that computes the gradient, not by a pass of its own. So does a
/// reduction over those rows, as a further pass and a per-row output: a layer norm's variance
/// of the centred rows that the row kernel writes for a later column sum (a ViT's pooled final
/// norm, forward only) is then not a second read of every row.
void fuse_steps::join_row_kernels(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  auto& kernels = plan.kernels;
  std::vector<std::size_t> writer = writers(plan);
  std::vector<bool> merged(kernels.size(), false);
  for (std::size_t j = 0; j < kernels.size(); ++j) {
    const Kernel& late = kernels[j];
    const bool row_sums = late.kind == KernelKind::reduce && late.extra_outputs.empty() &&
                          is_row_reduction(g, late.root);
    if ((late.kind != KernelKind::loop && !row_sums) || g.recomputed(late.root)) continue;
    bool elementwise = std::all_of(late.body.begin(), late.body.end(), [&](ValueId v) {
      OpId op = g.node(v).op;
      // Index ops that read nothing along another axis: reshapes, broadcasts (a bias along
      // the rows, a per-row value across its row), constants and iota (the labels' one-hot).
      bool keeps_elements =
          op == OpId::reshape || op == OpId::broadcast || op == OpId::constant || op == OpId::iota;
      return keeps_elements || (row_sums && v == late.root) ||
             (op != OpId::input && is_primitive(op) && !index_only(op) && !always_root(op));
    });
    std::size_t i = none;
    for (ValueId r : late.reads)
      if (writer[r] != none && writer[r] < j && kernels[writer[r]].kind == KernelKind::row)
        i = i == none ? writer[r] : std::max(i, writer[r]);
    if (!elementwise || i == none || merged[i]) continue;
    Kernel& early = kernels[i];
    if (row_reductions(g, early).empty()) continue;
    RowGeometry geo = row_geometry(g, early);
    // Full rows out, so every value is written at the element being computed; what it reads
    // exists by then: full rows, values the row kernel makes per row (the loss's log-sum-exp
    // for the logits' gradient), or what it broadcasts along them (a bias, the labels'
    // one-hot), as the row kernel's own body does (rows_stay_aligned checks the reductions).
    bool fits =
        early.reads.size() + late.reads.size() + early.outputs().size() + late.outputs().size() <=
        max_merged_buffers;
    for (ValueId out : late.outputs())
      fits = fits && (row_sums ? geo.per_row(g.type(out).shape) : geo.full_row(g.type(out).shape));
    for (ValueId r : late.reads)
      fits = fits && (early.writes(r) || writer[r] == none || writer[r] < i);
    // A sum over rows the row kernel computes: over every one of its rows, and of a value it
    // writes (not one it only reads, which another kernel may be writing over meanwhile).
    if (row_sums)
      fits = fits && geo.full_row(g.type(g.node(late.root).inputs[0]).shape) &&
             std::all_of(late.reads.begin(), late.reads.end(),
                         [&](ValueId r) { return early.writes(r); });
    if (!fits) continue;
    Kernel candidate = early;
    absorb(candidate, late);
    // A row kernel whose root is a per-row value (the log-sum-exp) takes the full-row output
    // as its root: only the root can be written over a buffer that dies in it (choose_in_place).
    if (!row_sums && !geo.full_row(g.type(early.root).shape)) {
      std::replace(candidate.extra_outputs.begin(), candidate.extra_outputs.end(), late.root,
                   early.root);
      candidate.root = late.root;
    }
    if (!rows_stay_aligned(plan, candidate, geo)) continue;
    for (ValueId out : late.outputs())
      writer[out] = i;
    early = std::move(candidate);
    merged[j] = true;
  }
  drop_merged(kernels, merged);
}

std::vector<ValueId> row_reductions(const Graph& g, const Kernel& kernel) {
  std::vector<ValueId> out;
  if (kernel.kind != KernelKind::row) return out;
  for (ValueId v : kernel.body) // body is in graph order: a reduction after those it uses
    if (is_row_reduction(g, v)) out.push_back(v);
  return out;
}

namespace {
// Each reduction's pass: one after the latest pass of a reduction its operand reads (within the
// kernel's body, which is in graph order).
std::vector<std::vector<std::size_t>> row_passes(const Graph& g, const Kernel& kernel,
                                                 const std::vector<ValueId>& reductions) {
  std::unordered_map<ValueId, std::size_t> after; // a body node: 1 + the latest pass it reads
  std::unordered_map<ValueId, std::size_t> position;
  for (std::size_t i = 0; i < reductions.size(); ++i)
    position[reductions[i]] = i;
  std::vector<std::vector<std::size_t>> passes;
  for (ValueId v : kernel.body) {
    std::size_t first_pass = 0;
    for (ValueId in : g.node(v).inputs)
      if (auto found = after.find(in); found != after.end())
        first_pass = std::max(first_pass, found->second);
    auto reduction = position.find(v);
    if (reduction == position.end()) {
      after[v] = first_pass;
      continue;
    }
    if (passes.size() <= first_pass) passes.resize(first_pass + 1);
    passes[first_pass].push_back(reduction->second);
    after[v] = first_pass + 1; // what reads it runs in a later pass
  }
  return passes;
}
} // namespace

RowLayout row_layout(const Graph& g, const Kernel& kernel) {
  RowLayout layout;
  layout.reductions = row_reductions(g, kernel);
  if (layout.reductions.empty()) return layout;
  layout.passes = row_passes(g, kernel, layout.reductions);
  RowGeometry geo = row_geometry(g, kernel);
  layout.length = geo.length;
  layout.rows = geo.rows;
  std::vector<ValueId> outputs = kernel.outputs();
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (is_column_partial(g, outputs[i], geo)) {
      layout.partials.push_back(i);
      layout.group = g.type(g.node(outputs[i]).inputs[0]).shape[1];
      continue;
    }
    const Shape& s = g.type(outputs[i]).shape;
    bool whole_rows =
        !s.empty() && s.back() == layout.length && numel(s) == layout.rows * layout.length;
    (whole_rows ? layout.full : layout.per_row).push_back(i);
  }
  return layout;
}

} // namespace sinter
