// jit/passes/fuse_order.cpp — when a fused plan's kernels run and where they write: collectives
// started early and waited for late, buffers' last uses, in-place updates
#include "jit/passes/fuse_internal.hpp"

#include <algorithm>
#include <limits>

namespace sinter {

using namespace fuse_steps;

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

/// A kernel's extra output that no other kernel reads and the graph does not return stops being
/// stored: merges leave them behind when a value's readers all end up in the kernel that
/// computes it (GELU's backward kept writing a product of its own terms, 154 MB a layer of a
/// ViT-S at batch 256, that nothing read). A loop kernel's root left so hands the root over to
/// its last extra output of the same shape (GELU's backward again, where its weight gradient's
/// operand is kept rather than recomputed: the product was the root, the gradient an extra).
void fuse_steps::drop_unread_outputs(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  std::vector<bool> needed(g.size(), false); // read by a kernel or returned, through views
  for (const NamedValue& out : g.outputs())
    needed[plan.view_of[out.id]] = needed[out.id] = true;
  std::vector<std::size_t> read_by(g.size(), plan.kernels.size()); // one reader, or `many`
  const std::size_t many = plan.kernels.size() + 1;
  for (std::size_t k = 0; k < plan.kernels.size(); ++k)
    for (ValueId r : plan.kernels[k].reads)
      for (ValueId buffer : {r, plan.view_of[r]}) {
        std::size_t& by = read_by[buffer];
        by = by == plan.kernels.size() || by == k ? k : many;
      }
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    Kernel& kernel = plan.kernels[k];
    // Library calls (GEMMs, attention, collectives) and scatters write what they write.
    if (kernel.kind != KernelKind::loop && kernel.kind != KernelKind::row &&
        kernel.kind != KernelKind::reduce)
      continue;
    auto unread = [&](ValueId out) {
      return !needed[out] && (read_by[out] == plan.kernels.size() || read_by[out] == k);
    };
    std::erase_if(kernel.extra_outputs, [&](ValueId out) {
      if (unread(out)) stop_storing(plan, out);
      return unread(out);
    });
    if (kernel.kind != KernelKind::loop || !unread(kernel.root)) continue;
    auto heir =
        std::find_if(kernel.extra_outputs.rbegin(), kernel.extra_outputs.rend(),
                     [&](ValueId out) { return g.type(out).shape == g.type(kernel.root).shape; });
    if (heir == kernel.extra_outputs.rend()) continue;
    ValueId old_root = kernel.root;
    kernel.root = *heir;
    if (kernel.overwrites == old_root) kernel.overwrites = kernel.root;
    kernel.extra_outputs.erase(std::next(heir).base());
    stop_storing(plan, old_root);
  }
}

/// Moves each collective, and each loop kernel that only feeds collectives (a gradient bucket
/// being packed), up to right after the kernels that write what it reads: a bucket's reduction
/// then starts as soon as its last gradient exists and runs under the rest of the backward
/// pass. Every rank compiles the same graph, so every rank starts its collectives in the same
/// order.
void fuse_steps::hoist_collectives(FusionPlan& plan) {
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

/// Lets each loop or row kernel write over a buffer that dies in it, when that is safe.
void fuse_steps::choose_in_place(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  std::vector<bool> is_output(g.size(), false);
  for (const NamedValue& out : g.outputs())
    is_output[out.id] = true;
  // A collective still reads its operands until its wait point: nothing writes over them first.
  std::vector<std::size_t> last_use = buffer_last_use(plan);
  std::vector<bool> taken(g.size(), false); // one kernel writes over a buffer at most once
  // A GEMM's product is the first choice: a cuBLASLt epilogue that absorbs the kernel then
  // writes its result where the GEMM would have, not over another operand it still reads
  // (DGELU reads GELU's pre-activation as it writes the gradient).
  std::vector<bool> gemm_product(g.size(), false);
  for (const Kernel& kernel : plan.kernels)
    if (kernel.kind == KernelKind::gemm) gemm_product[kernel.root] = true;
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
    bool loop = kernel.kind == KernelKind::loop, row = kernel.kind == KernelKind::row;
    if (!(loop || row) || is_output[kernel.root]) continue;
    // Each output is stored after every output's value is computed (the schedules do so), so
    // an aligned read is still the old value whichever output takes over the buffer; a row
    // kernel's reductions have read the whole row by then.
    const TensorType& t = g.type(kernel.root);
    std::vector<ValueId> candidates =
        loop ? aligned_reads(plan, kernel) : row_overwritable_reads(plan, kernel);
    std::stable_partition(candidates.begin(), candidates.end(),
                          [&](ValueId r) { return gemm_product[r]; });
    for (ValueId r : candidates) {
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

/// A donated input's buffer takes its output when the loop kernel writing the output is the
/// input's last reader and reads it only at the element being written (the schedules compute
/// every output's value before storing any, as for in-place kernels), and the graph does not
/// also return the input.
void fuse_steps::store_over_donated_inputs(FusionPlan& plan) {
  const Graph& g = *plan.graph;
  if (g.donations().empty()) return;
  std::vector<bool> returned(g.size(), false);
  for (const NamedValue& out : g.outputs())
    returned[out.id] = returned[plan.view_of[out.id]] = true;
  std::vector<std::size_t> last_use = buffer_last_use(plan);
  constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> writer(g.size(), none), reader(g.size(), none);
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    for (ValueId out : plan.kernels[k].outputs())
      writer[out] = k;
    for (ValueId r : plan.kernels[k].reads)
      reader[r] = reader[r] == none ? k : reader[r];
  }
  std::vector<bool> stored(g.size(), false);
  for (const Donation& d : g.donations()) {
    ValueId in = g.inputs()[d.input].id, out = g.outputs()[d.output].id;
    std::size_t k = writer[out];
    if (out == in || returned[in] || stored[out] || k == none ||
        plan.kernels[k].kind != KernelKind::loop)
      continue;
    Kernel& kernel = plan.kernels[k];
    bool read_here = std::find(kernel.reads.begin(), kernel.reads.end(), in) != kernel.reads.end();
    if (reader[in] != none && (last_use[in] > k || (last_use[in] == k && !read_here))) continue;
    if (read_here) {
      std::vector<ValueId> aligned = aligned_reads(plan, kernel);
      if (std::find(aligned.begin(), aligned.end(), in) == aligned.end()) continue;
    }
    kernel.over_inputs.emplace_back(out, in);
    stored[out] = true;
  }
}

} // namespace sinter
