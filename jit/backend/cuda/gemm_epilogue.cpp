// jit/backend/cuda/gemm_epilogue.cpp — matching bias, bias+ReLU, bias+GELU(tanh) and bias-gradient
// kernels next to GEMMs that cuBLASLt can run as epilogues
#include "jit/backend/cuda/gemm_epilogue.hpp"
#include "jit/passes/reshapes.hpp"

#include "jit/pipeline/pipeline.hpp"
#include "ops/value.hpp"

#include <algorithm>
#include <deque>
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

/// The pipeline's gradient of gelu_tanh(z) with cotangent dy (both of type `t`): dy ·
/// gelu′(z) as autodiff writes it, to compare GELU's backward loops against.
struct LoweredGeluGradient {
  Graph graph;
  ValueId z = 0, dy = 0, root = 0;
};

LoweredGeluGradient lowered_gelu_gradient(const TensorType& t) {
  Graph g;
  Value z = input(g, "z", t), dy = input(g, "dy", t);
  g.add_output("y", (gelu_tanh(z) * dy).id);
  std::ostream quiet(nullptr);
  LoweredGeluGradient out{
      Pipeline::standard(AutodiffOptions{{"z"}, 0}).run(g, DumpSelection(""), quiet)};
  for (const NamedValue& in : out.graph.inputs())
    (in.name == "z" ? out.z : out.dy) = in.id;
  for (const NamedValue& o : out.graph.outputs())
    if (o.name == gradient_output_name("z")) out.root = o.id;
  return out;
}

/// The reference graphs by type, each built once per plan: a model's MLPs share one.
class GeluReferences {
public:
  const LoweredGelu& forward(const TensorType& t) { return find(forward_, t, lowered_gelu); }
  const LoweredGeluGradient& gradient(const TensorType& t) {
    return find(gradient_, t, lowered_gelu_gradient);
  }

private:
  template <class Reference, class Build>
  static const Reference& find(std::deque<std::pair<TensorType, Reference>>& made,
                               const TensorType& t, Build build) {
    for (const auto& [type, reference] : made)
      if (type == t) return reference;
    return made.emplace_back(t, build(t)).second;
  }
  std::deque<std::pair<TensorType, LoweredGelu>> forward_;
  std::deque<std::pair<TensorType, LoweredGeluGradient>> gradient_;
};

/// `v` with the reshapes and floating-point casts on top of it taken off, each noted in `used`.
ValueId under_reshapes_and_casts(const Graph& g, ValueId v, std::set<ValueId>& used) {
  for (;;) {
    const Node& n = g.node(v);
    bool floating =
        n.op == OpId::cast && (is_float(n.type.dtype) && is_float(g.type(n.inputs[0]).dtype));
    if (n.op != OpId::reshape && !floating) return v;
    used.insert(v);
    v = n.inputs[0];
  }
}

/// A free value of a reference computation (`ref`'s node) and the value of `g` it stands for,
/// which `g` may read through reshapes (a GEMM's [rows, n] result seen as [B, T, n]).
struct Leaf {
  ValueId ref, value;
};

/// Whether node `a` of `g` computes what node `b` of `ref` does, each leaf's `value` standing
/// for its `ref`; collects the nodes of `g` it walked through in `used`.
bool same_computation(const Graph& g, ValueId a, const Graph& ref, ValueId b,
                      std::span<const Leaf> leaves, std::set<ValueId>& used) {
  for (const Leaf& leaf : leaves)
    if (b == leaf.ref) {
      std::set<ValueId> chain;
      if (under_reshapes_and_casts(g, a, chain) != leaf.value) return false;
      used.insert(chain.begin(), chain.end());
      return true;
    }
  for (const Leaf& leaf : leaves)
    if (a == leaf.value) return false;
  const Node& na = g.node(a);
  const Node& nb = ref.node(b);
  if (na.op != nb.op || !(na.type == nb.type) || !(na.attrs == nb.attrs) ||
      na.inputs.size() != nb.inputs.size())
    return false;
  used.insert(a);
  for (std::size_t i = 0; i < na.inputs.size(); ++i)
    if (!same_computation(g, na.inputs[i], ref, nb.inputs[i], leaves, used)) return false;
  return true;
}

/// The pre-activation P if `loop`'s body is exactly GELU's gradient dG · gelu′(P), with `dg`
/// the GEMM's result (read through reshapes) and P a stored value of the loop's type, both its
/// only reads, and its one output of dG's type and elements.
std::optional<ValueId> match_gelu_gradient(const Graph& g, const Kernel& loop, ValueId dg,
                                           GeluReferences& references) {
  if (!loop.extra_outputs.empty() || loop.reads.size() != 2) return std::nullopt;
  const TensorType& result = g.type(loop.root);
  const TensorType& product = g.type(dg);
  if (result.dtype != product.dtype || numel(result.shape) != numel(product.shape))
    return std::nullopt;
  ValueId p = loop.reads[0] == dg ? loop.reads[1] : loop.reads[0];
  if (p == dg || g.type(p) != result) return std::nullopt;
  const LoweredGeluGradient& gradient = references.gradient(result);
  std::set<ValueId> used;
  const Leaf leaves[] = {{gradient.z, p}, {gradient.dy, dg}};
  if (!same_computation(g, loop.root, gradient.graph, gradient.root, leaves, used))
    return std::nullopt;
  if (used != std::set<ValueId>(loop.body.begin(), loop.body.end())) return std::nullopt;
  return p;
}

/// The bias buffer and epilogue kind if `loop`'s body is exactly c + broadcast(bias), then
/// optionally ReLU (max(·, 0)) or GELU (tanh form), with `c` the GEMM's result and the loop's
/// result of c's type. Reshapes and floating-point casts may come between: under mixed precision
/// c (bf16) is widened to f32, the bias is a bf16 or f32 vector widened or narrowed to the sum's
/// type, and the activation is narrowed back; cuBLASLt adds and activates in f32 and rounds once.
/// With a loop that also stores the sum (GELU's pre-activation), `aux` is set to that output.
std::optional<std::pair<ValueId, EpilogueKind>> match_body(const Graph& g, const Kernel& loop,
                                                           ValueId c, GeluReferences& references,
                                                           ValueId* aux = nullptr) {
  if (loop.extra_outputs.size() > 1 || loop.reads.size() != 2) return std::nullopt;
  // The GEMM writes the loop's result: the same elements in the same order, maybe reshaped
  // (a qkv projection's sum split into [batch, tokens, 3·width] for attention's views).
  const TensorType& out = g.type(c);
  auto written_by_gemm = [&](ValueId v) {
    const TensorType& result = g.type(v);
    return result.dtype == out.dtype && numel(result.shape) == numel(out.shape) &&
           !result.shape.empty() && result.shape.back() == out.shape.back();
  };
  for (ValueId v : loop.outputs())
    if (!written_by_gemm(v)) return std::nullopt;
  std::set<ValueId> body(loop.body.begin(), loop.body.end());
  // The add of c and a broadcast bias row.
  std::optional<std::pair<ValueId, ValueId>> found; // the sum, the bias buffer
  std::set<ValueId> sum_used;
  for (ValueId v : loop.body) {
    const Node& n = g.node(v);
    if (n.op != OpId::add) continue;
    for (int side = 0; side < 2 && !found; ++side) {
      std::set<ValueId> used{v};
      if (under_reshapes_and_casts(g, n.inputs[side], used) != c) continue;
      ValueId spread = under_reshapes_and_casts(g, n.inputs[1 - side], used);
      if (g.node(spread).op != OpId::broadcast) continue;
      used.insert(spread);
      ValueId bias = under_reshapes_and_casts(g, g.node(spread).inputs[0], used);
      const TensorType& b = g.type(bias);
      if (b.shape != Shape{out.shape.back()} || b.dtype == DType::f64 || !is_float(b.dtype) ||
          std::find(loop.reads.begin(), loop.reads.end(), bias) == loop.reads.end())
        continue;
      found = std::make_pair(v, bias);
      sum_used = std::move(used);
    }
    if (found) break;
  }
  if (!found) return std::nullopt;
  auto [sum, bias] = *found;
  std::set<ValueId> used = sum_used;
  // A stored sum beside the activation: the GEMM writes it as GELU_AUX_BIAS's aux.
  ValueId activated = loop.root;
  if (!loop.extra_outputs.empty()) {
    if (!aux) return std::nullopt;
    ValueId extra = loop.extra_outputs[0];
    std::set<ValueId> root_chain, extra_chain;
    if (under_reshapes_and_casts(g, loop.root, root_chain) == sum) {
      used.insert(root_chain.begin(), root_chain.end());
      *aux = loop.root;
      activated = extra;
    } else if (under_reshapes_and_casts(g, extra, extra_chain) == sum) {
      used.insert(extra_chain.begin(), extra_chain.end());
      *aux = extra;
    } else {
      return std::nullopt;
    }
  }
  ValueId activation = under_reshapes_and_casts(g, activated, used);
  const bool stores_sum = !loop.extra_outputs.empty();
  if (activation == sum) {
    if (used == body && !stores_sum) return std::make_pair(bias, EpilogueKind::bias);
    return std::nullopt;
  }
  const Node& act = g.node(activation);
  if (!stores_sum && act.op == OpId::maximum && act.inputs[0] == sum &&
      g.node(act.inputs[1]).op == OpId::constant && g.node(act.inputs[1]).attrs.real == 0.0) {
    used.insert(activation);
    used.insert(act.inputs[1]);
    if (used == body) return std::make_pair(bias, EpilogueKind::relu_bias);
    return std::nullopt;
  }
  const LoweredGelu& gelu = references.forward(g.type(sum));
  const Leaf z[] = {{gelu.z, sum}};
  if (same_computation(g, activation, gelu.graph, gelu.root, z, used) && used == body)
    return std::make_pair(bias, stores_sum ? EpilogueKind::gelu_aux_bias : EpilogueKind::gelu_bias);
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
  if (ValueId low = before_widening(g, x); low != x) return low;
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
  GeluReferences references;
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
    ValueId aux = 0;
    auto match = match_body(g, next, c, references, &aux);
    if (!match) continue;
    bool clash = false;
    for (ValueId written : next.outputs())
      clash = clash || overlaps(memory, g, written, gemm.gemm_a.buffer) ||
              overlaps(memory, g, written, gemm.gemm_b.buffer) ||
              overlaps(memory, g, written, match->first);
    if (clash) continue;
    GemmEpilogue epilogue{k, k + 1, match->second, match->first, aux};
    found.push_back(epilogue);
  }
  std::vector<bool> taken(plan.kernels.size(), false);
  for (const GemmEpilogue& e : found)
    taken[e.gemm] = true;
  // GELU's backward: a loop computing dG · gelu′(P) from a GEMM's dG and a stored
  // pre-activation P, in place over dG, which nothing else reads. The weight gradient's GEMM
  // usually runs between the two; the loop's result takes dG's slot, alive from the GEMM on, so
  // the GEMM can write it there as DGELU, reading P (alive until the loop) as its aux.
  std::vector<std::size_t> writer(g.size(), plan.kernels.size());
  for (std::size_t k = 0; k < plan.kernels.size(); ++k)
    for (ValueId out : plan.kernels[k].outputs())
      writer[out] = k;
  auto read_by = [&](ValueId v, std::size_t except) {
    for (std::size_t j = 0; j < plan.kernels.size(); ++j) {
      const Kernel& other = plan.kernels[j];
      if (j == except) continue;
      if (std::find(other.reads.begin(), other.reads.end(), v) != other.reads.end() ||
          (other.kind == KernelKind::gemm &&
           (other.gemm_a.buffer == v || other.gemm_b.buffer == v)))
        return true;
    }
    return false;
  };
  for (std::size_t l = 0; l < plan.kernels.size(); ++l) {
    const Kernel& loop = plan.kernels[l];
    if (loop.kind != KernelKind::loop || loop.reads.size() != 2 || taken[l]) continue;
    ValueId dg = loop.overwrites;
    std::size_t k = writer[dg];
    if (k >= l || plan.kernels[k].kind != KernelKind::gemm || taken[k] ||
        plan.kernels[k].root != dg || g.type(dg).shape.size() != 2 ||
        std::find(loop.reads.begin(), loop.reads.end(), dg) == loop.reads.end() ||
        std::any_of(g.outputs().begin(), g.outputs().end(),
                    [&](const NamedValue& o) { return o.id == dg; }) ||
        read_by(dg, l))
      continue;
    std::optional<ValueId> p = match_gelu_gradient(g, loop, dg, references);
    if (!p) continue;
    const Kernel& gemm = plan.kernels[k];
    if (overlaps(memory, g, loop.root, gemm.gemm_a.buffer) ||
        overlaps(memory, g, loop.root, gemm.gemm_b.buffer) || overlaps(memory, g, loop.root, *p))
      continue;
    found.push_back(GemmEpilogue{k, l, EpilogueKind::gelu_gradient, 0, *p});
    taken[k] = true;
  }
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
