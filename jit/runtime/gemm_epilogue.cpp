// jit/runtime/gemm_epilogue.cpp — matching bias (+ ReLU) loop kernels after GEMMs
#include "jit/runtime/gemm_epilogue.hpp"

#include <algorithm>
#include <optional>

namespace sinter {
namespace {

bool is_zero_constant(const Node& n) { return n.op == OpId::constant && n.attrs.real == 0.0; }

/// The bias buffer and epilogue kind if `loop`'s body is exactly broadcast(bias) + c, then
/// optionally max(·, 0), with `c` the GEMM's result.
std::optional<std::pair<ValueId, EpilogueKind>> match_body(const Graph& g, const Kernel& loop,
                                                           ValueId c) {
  const Node& root = g.node(loop.root);
  ValueId sum = loop.root;
  EpilogueKind kind = EpilogueKind::bias;
  if (root.op == OpId::maximum) {
    if (!is_zero_constant(g.node(root.inputs[1]))) return std::nullopt;
    sum = root.inputs[0];
    kind = EpilogueKind::relu_bias;
  }
  const Node& add = g.node(sum);
  if (add.op != OpId::add) return std::nullopt;
  ValueId other = add.inputs[0] == c ? add.inputs[1] : add.inputs[1] == c ? add.inputs[0] : c;
  if (other == c) return std::nullopt;
  const Node& spread = g.node(other);
  if (spread.op != OpId::broadcast) return std::nullopt;
  ValueId bias = spread.inputs[0];
  const TensorType& out = g.type(c);
  if (g.type(bias).shape != Shape{out.shape.back()} || g.type(bias).dtype != out.dtype)
    return std::nullopt;
  // Nothing else may be computed in the kernel.
  std::size_t expected = kind == EpilogueKind::relu_bias ? 4 : 2;
  if (loop.body.size() != expected) return std::nullopt;
  if (std::find(loop.reads.begin(), loop.reads.end(), bias) == loop.reads.end())
    return std::nullopt;
  return std::make_pair(bias, kind);
}

bool overlaps(const MemoryPlan& memory, const Graph& g, ValueId a, ValueId b) {
  auto oa = memory.offset_of(a), ob = memory.offset_of(b);
  if (!oa || !ob) return false; // outside the arena: separate buffers
  auto bytes = [&](ValueId v) {
    return static_cast<int64_t>(numel(g.type(v).shape) *
                                static_cast<int64_t>(dtype_bytes(g.type(v).dtype)));
  };
  return *oa < *ob + bytes(b) && *ob < *oa + bytes(a);
}

} // namespace

std::vector<GemmEpilogue> find_gemm_epilogues(const FusionPlan& plan, const MemoryPlan& memory) {
  const Graph& g = *plan.graph;
  std::vector<GemmEpilogue> found;
  for (std::size_t k = 0; k + 1 < plan.kernels.size(); ++k) {
    const Kernel& gemm = plan.kernels[k];
    const Kernel& next = plan.kernels[k + 1];
    if (gemm.kind != KernelKind::gemm || next.kind != KernelKind::loop) continue;
    ValueId c = gemm.root;
    const TensorType& t = g.type(c);
    if (t.shape.size() != 2 ||
        !(t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16))
      continue;
    bool output = std::any_of(g.outputs().begin(), g.outputs().end(),
                              [&](const NamedValue& o) { return o.id == c; });
    bool read_elsewhere = false;
    for (std::size_t j = 0; j < plan.kernels.size(); ++j) {
      const Kernel& other = plan.kernels[j];
      if (j == k + 1) continue;
      read_elsewhere |= std::find(other.reads.begin(), other.reads.end(), c) != other.reads.end();
      read_elsewhere |=
          other.kind == KernelKind::gemm && (other.gemm_a.buffer == c || other.gemm_b.buffer == c);
    }
    if (output || read_elsewhere) continue;
    auto match = match_body(g, next, c);
    if (!match) continue;
    if (overlaps(memory, g, next.root, gemm.gemm_a.buffer) ||
        overlaps(memory, g, next.root, gemm.gemm_b.buffer) ||
        overlaps(memory, g, next.root, match->first))
      continue;
    found.push_back({k, k + 1, match->second, match->first});
  }
  std::vector<bool> taken(plan.kernels.size(), false);
  for (const GemmEpilogue& e : found)
    taken[e.gemm] = true;
  for (std::size_t r = 0; r < plan.kernels.size(); ++r) {
    const Kernel& reduce = plan.kernels[r];
    const Node& sum = g.node(reduce.root);
    if (reduce.kind != KernelKind::reduce || sum.op != OpId::reduce_sum ||
        sum.attrs.ints != std::vector<int64_t>{0} || reduce.body.size() != 1 ||
        reduce.reads.size() != 1 || reduce.reads[0] != sum.inputs[0])
      continue;
    ValueId dy = sum.inputs[0];
    const TensorType& t = g.type(dy);
    if (t.shape.size() != 2 ||
        !(t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16))
      continue;
    for (std::size_t k = r + 1; k < plan.kernels.size(); ++k) {
      const Kernel& gemm = plan.kernels[k];
      if (gemm.kind != KernelKind::gemm || taken[k] || gemm.gemm_b.buffer != dy ||
          gemm.gemm_b.logical != dy || gemm.gemm_b.transposed ||
          g.type(gemm.root).shape.size() != 2 || g.type(gemm.root).dtype != t.dtype)
        continue;
      bool read_before = false;
      for (std::size_t j = r + 1; j <= k; ++j) {
        const Kernel& other = plan.kernels[j];
        read_before |=
            std::find(other.reads.begin(), other.reads.end(), reduce.root) != other.reads.end();
        read_before |= other.kind == KernelKind::gemm &&
                       (other.gemm_a.buffer == reduce.root || other.gemm_b.buffer == reduce.root);
      }
      if (read_before) break;
      found.push_back({k, r, EpilogueKind::bias_gradient, 0});
      taken[k] = true;
      break;
    }
  }
  return found;
}

} // namespace sinter
