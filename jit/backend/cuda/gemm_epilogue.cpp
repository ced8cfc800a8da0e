// jit/backend/cuda/gemm_epilogue.cpp — matching bias, bias+ReLU, bias+GELU(tanh) and bias-gradient
// kernels next to GEMMs that cuBLASLt can run as epilogues
#include "jit/backend/cuda/gemm_epilogue.hpp"
#include "jit/passes/reshapes.hpp"

#include "jit/pipeline/pipeline.hpp"
#include "ops/value.hpp"

#include <algorithm>
#include <iostream>
#include <optional>
#include <set>

namespace sinter {
namespace {

/// The pipeline's lowering of gelu_tanh(z) for a z of type `t`: kernel bodies are compared
/// against it, so a GELU is recognised however the DSL spelled it.
struct LoweredGelu {
  Graph graph;
  ValueId z = 0, root = 0;
};

LoweredGelu lowered_gelu(const TensorType& t) {
  Graph g;
  Value z = input(g, "z", t);
  g.add_output("y", gelu_tanh(z).id);
  std::ostream quiet(nullptr);
  LoweredGelu out{Pipeline::standard(std::nullopt).run(g, DumpSelection(""), quiet)};
  out.z = out.graph.inputs()[0].id;
  out.root = out.graph.outputs()[0].id;
  return out;
}

/// Whether node `a` of `g` computes what node `b` of `ref` does, `z` standing for `ref_z`;
/// collects the nodes of `g` it walked through in `used`.
bool same_computation(const Graph& g, ValueId a, ValueId z, const Graph& ref, ValueId b,
                      ValueId ref_z, std::set<ValueId>& used) {
  if (b == ref_z) return a == z;
  if (a == z) return false;
  const Node& na = g.node(a);
  const Node& nb = ref.node(b);
  if (na.op != nb.op || !(na.type == nb.type) || !(na.attrs == nb.attrs) ||
      na.inputs.size() != nb.inputs.size())
    return false;
  used.insert(a);
  for (std::size_t i = 0; i < na.inputs.size(); ++i)
    if (!same_computation(g, na.inputs[i], z, ref, nb.inputs[i], ref_z, used)) return false;
  return true;
}

/// The bias buffer and epilogue kind if `loop`'s body is exactly broadcast(bias) + c, then
/// optionally ReLU (max(·, 0)) or GELU (tanh form), with `c` the GEMM's result.
std::optional<std::pair<ValueId, EpilogueKind>> match_body(const Graph& g, const Kernel& loop,
                                                           ValueId c) {
  if (!loop.extra_outputs.empty()) return std::nullopt; // the GEMM writes one result
  // The add of c and a broadcast bias row.
  ValueId sum = 0, spread = 0;
  for (ValueId v : loop.body) {
    const Node& n = g.node(v);
    if (n.op != OpId::add) continue;
    ValueId other = n.inputs[0] == c ? n.inputs[1] : n.inputs[1] == c ? n.inputs[0] : c;
    if (other != c && g.node(other).op == OpId::broadcast) {
      sum = v;
      spread = other;
    }
  }
  if (!spread) return std::nullopt;
  ValueId bias = g.node(spread).inputs[0];
  const TensorType& out = g.type(c);
  if (g.type(bias).shape != Shape{out.shape.back()} || g.type(bias).dtype != out.dtype ||
      loop.reads.size() != 2 ||
      std::find(loop.reads.begin(), loop.reads.end(), bias) == loop.reads.end())
    return std::nullopt;
  std::set<ValueId> body(loop.body.begin(), loop.body.end());
  if (loop.root == sum && body.size() == 2) return std::make_pair(bias, EpilogueKind::bias);
  const Node& root = g.node(loop.root);
  if (root.op == OpId::maximum && root.inputs[0] == sum &&
      g.node(root.inputs[1]).op == OpId::constant && g.node(root.inputs[1]).attrs.real == 0.0 &&
      body.size() == 4)
    return std::make_pair(bias, EpilogueKind::relu_bias);
  LoweredGelu gelu = lowered_gelu(g.type(sum));
  std::set<ValueId> used{sum, spread};
  if (same_computation(g, loop.root, sum, gelu.graph, gelu.root, gelu.z, used) && used == body)
    return std::make_pair(bias, EpilogueKind::gelu_bias);
  return std::nullopt;
}

/// The value whose column sums reduction kernel `reduce` computes, if it is a bias gradient
/// cuBLASLt can take: the kernel's one output is reduce_sum over every dim but the last of a
/// value x of 2 or more dims, or of x cast from bf16/f16 up to f32 (mixed precision).
std::optional<ValueId> summed_value(const Graph& g, const Kernel& reduce) {
  const Node& sum = g.node(reduce.root);
  if (sum.op != OpId::reduce_sum || reduce.outputs().size() != 1) return std::nullopt;
  ValueId x = sum.inputs[0];
  const TensorType& t = g.type(x);
  if (t.shape.size() < 2) return std::nullopt;
  std::vector<int64_t> leading(t.shape.size() - 1);
  for (std::size_t i = 0; i < leading.size(); ++i)
    leading[i] = static_cast<int64_t>(i);
  if (sum.attrs.ints != leading || g.type(reduce.root).shape != Shape{t.shape.back()})
    return std::nullopt;
  const Node& widen = g.node(x);
  if (t.dtype == DType::f32 && widen.op == OpId::cast) {
    DType low = g.type(widen.inputs[0]).dtype;
    if (low == DType::bf16 || low == DType::f16) return widen.inputs[0];
  }
  if (t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16) return x;
  return std::nullopt;
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
    if (reduce.kind != KernelKind::reduce) continue;
    auto summed = summed_value(g, reduce);
    if (!summed) continue;
    const TensorType& t = g.type(*summed);
    const ValueId source = through_reshapes(g, *summed);
    for (std::size_t k = r + 1; k < plan.kernels.size(); ++k) {
      const Kernel& gemm = plan.kernels[k];
      // The GEMM's untransposed B, seen as [rows, n], holds the summed values (the same node,
      // up to reshapes): k runs over its rows, so cuBLASLt's BGRADA sums what the reduction
      // sums, and the reduction's own reads (the values it recomputed them from) are not needed.
      if (gemm.kind != KernelKind::gemm || taken[k] || gemm.gemm_b.transposed ||
          through_reshapes(g, gemm.gemm_b.buffer) != source ||
          g.type(gemm.gemm_b.logical).shape.size() != 2 ||
          g.type(gemm.gemm_b.logical).shape.back() != t.shape.back() ||
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
