// jit/passes/simplify.cpp — algebraic identities and constant folding on splat constants
#include "jit/passes/passes.hpp"
#include "ops/registry.hpp"

#include <cmath>
#include <optional>

namespace sinter {
namespace {

/// Whether every value of `from` is exactly a value of `to`.
bool widens_exactly(DType from, DType to) {
  switch (from) {
  case DType::bf16:
  case DType::f16: return to == DType::f32 || to == DType::f64;
  case DType::f32: return to == DType::f64;
  default: return false;
  }
}

/// The value of a splat constant (a constant, possibly broadcast or reshaped), if `v` is one.
std::optional<double> splat_value(Value v) {
  const Node& n = v.node();
  if (n.op == OpId::constant) return n.attrs.real;
  if (n.op == OpId::broadcast || n.op == OpId::reshape)
    return splat_value(Value{v.graph, n.inputs[0]});
  return std::nullopt;
}

bool is_splat(Value v, double x) {
  auto s = splat_value(v);
  return s && *s == x;
}

bool foldable(OpId op) { return op_def(op).foldable; }

/// Folds an op whose operands are all splat constants into one splat constant.
Value fold_constants(const Node& n, std::span<const Value> operands) {
  if (!foldable(n.op) || operands.empty()) return {};
  std::vector<F64Tensor> scalars;
  for (Value v : operands) {
    auto s = splat_value(v);
    if (!s) return {};
    scalars.push_back(F64Tensor{{}, {*s}});
  }
  TensorType scalar_type{n.type.dtype, {}};
  Attrs attrs = n.attrs;
  if (n.op == OpId::broadcast || n.op == OpId::reshape || n.op == OpId::permute)
    return constant(*operands[0].graph, scalars[0].data[0], n.type.dtype, n.type.shape);
  double folded = op_def(n.op).reference(scalars, attrs, scalar_type).data[0];
  if (is_integer(n.type.dtype)) folded = std::trunc(folded);
  return constant(*operands[0].graph, folded, n.type.dtype, n.type.shape);
}

Value same_type(Value v, const Node& n) {
  if (v.type() == n.type) return v;
  if (v.dtype() == n.type.dtype) return emit(OpId::broadcast, {v}, Attrs{.ints = n.type.shape});
  return {};
}

Value simplify_node(const Node& n, std::span<const Value> in) {
  if (Value folded = fold_constants(n, in)) return folded;
  switch (n.op) {
  case OpId::add:
    if (is_splat(in[1], 0.0)) return same_type(in[0], n);
    if (is_splat(in[0], 0.0)) return same_type(in[1], n);
    break;
  case OpId::sub:
    if (is_splat(in[1], 0.0)) return same_type(in[0], n);
    if (is_splat(in[0], 0.0)) return -in[1];
    if (in[1].node().op == OpId::neg) return in[0] + Value{in[1].graph, in[1].node().inputs[0]};
    break;
  case OpId::mul:
    if (is_splat(in[1], 1.0)) return same_type(in[0], n);
    if (is_splat(in[0], 1.0)) return same_type(in[1], n);
    if (is_splat(in[1], -1.0)) return -in[0];
    if (is_splat(in[0], -1.0)) return -in[1];
    break;
  case OpId::div:
    if (is_splat(in[1], 1.0)) return same_type(in[0], n);
    break;
  case OpId::neg:
    if (in[0].node().op == OpId::neg) return Value{in[0].graph, in[0].node().inputs[0]};
    break;
  case OpId::reshape:
    if (in[0].shape() == n.type.shape) return in[0];
    if (in[0].node().op == OpId::reshape)
      return reshape(Value{in[0].graph, in[0].node().inputs[0]}, n.type.shape);
    break;
  case OpId::broadcast:
    if (in[0].shape() == n.type.shape) return in[0];
    break;
  case OpId::permute: {
    std::vector<int64_t> perm = n.attrs.ints;
    Value source = in[0];
    if (source.node().op == OpId::permute) {
      // permute(permute(x, p), q)[i] = x[p[q[i]]]
      const auto& inner = source.node().attrs.ints;
      for (int64_t& p : perm)
        p = inner[p];
      source = Value{source.graph, source.node().inputs[0]};
    }
    bool identity = true;
    for (std::size_t i = 0; i < perm.size(); ++i)
      identity &= perm[i] == static_cast<int64_t>(i);
    if (identity) return source;
    if (source.id != in[0].id) return permute(source, perm);
    break;
  }
  case OpId::cast:
    if (in[0].dtype() == n.type.dtype) return in[0];
    // Narrowing back what an exact widening made (a bf16 weight stored low, raised to f32,
    // then cast to bf16 by autocast) gives the original.
    if (in[0].node().op == OpId::cast) {
      Value source{in[0].graph, in[0].node().inputs[0]};
      if (source.dtype() == n.type.dtype && widens_exactly(source.dtype(), in[0].dtype()))
        return source;
    }
    break;
  case OpId::where:
    if (in[1].id == in[2].id) return in[1];
    if (auto c = splat_value(in[0])) return same_type(*c != 0 ? in[1] : in[2], n);
    break;
  default: break;
  }
  return {};
}

} // namespace

// Replaced nodes leave their old operands behind; the cse rebuild drops what is now dead.
Graph simplify(const Graph& graph) { return cse(rebuild(graph, simplify_node)); }

} // namespace sinter
