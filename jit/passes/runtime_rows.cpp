// jit/passes/runtime_rows.cpp — a kernel's values seen as [rows, inner...], checked op by op
#include "jit/passes/runtime_rows.hpp"

#include "ops/registry.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>

namespace sinter {
namespace {

/// The leading dims that multiply to `rows` (the fewest), or 0 when none do.
std::size_t rows_prefix(const Shape& s, int64_t rows) {
  int64_t product = 1;
  for (std::size_t k = 0; k < s.size(); ++k) {
    product *= s[k];
    if (product == rows) return k + 1;
    if (product > rows || product == 0) return 0;
  }
  return 0;
}

bool elementwise(OpId op) {
  switch (op) {
  case OpId::add:
  case OpId::sub:
  case OpId::mul:
  case OpId::div:
  case OpId::neg:
  case OpId::pow:
  case OpId::maximum:
  case OpId::minimum:
  case OpId::exp:
  case OpId::log:
  case OpId::sqrt:
  case OpId::rsqrt:
  case OpId::tanh:
  case OpId::erf:
  case OpId::abs:
  case OpId::softplus:
  case OpId::less:
  case OpId::less_equal:
  case OpId::equal:
  case OpId::not_equal:
  case OpId::where:
  case OpId::cast:
  case OpId::stop_gradient: return true;
  default: return false;
  }
}

/// The row count a kernel of this kind would take as its parameter (0: none).
int64_t kernel_rows(const Graph& g, const Kernel& k) {
  const Node& root = g.node(k.root);
  switch (k.kind) {
  case KernelKind::loop: {
    const Shape& s = root.type.shape;
    return s.size() < 2 ? 0 : numel(s) / std::max<int64_t>(1, s.back());
  }
  case KernelKind::row: {
    std::vector<ValueId> reductions = row_reductions(g, k);
    return reductions.empty() ? 0 : numel(g.type(reductions.front()).shape);
  }
  case KernelKind::reduce: {
    const Shape& xs = g.type(root.inputs[0]).shape;
    const std::vector<int64_t>& axes = root.attrs.ints;
    if (axes.empty()) return 0;
    bool leading = true; // axes == 0, 1, ..., j-1: a column (or whole) reduction
    for (std::size_t i = 0; i < axes.size(); ++i)
      leading = leading && axes[i] == static_cast<int64_t>(i);
    auto end = leading ? static_cast<std::ptrdiff_t>(axes.size()) : axes.front();
    return std::accumulate(xs.begin(), xs.begin() + end, int64_t{1}, std::multiplies<>());
  }
  case KernelKind::scatter_add: return numel(g.type(root.inputs[0]).shape);
  default: return 0;
  }
}

} // namespace

std::optional<RuntimeRowsKernel> RuntimeRowsKernel::of(const FusionPlan& plan,
                                                       const Kernel& kernel) {
  const Graph& g = *plan.graph;
  int64_t rows = kernel_rows(g, kernel);
  if (rows <= 1) return std::nullopt;
  RuntimeRowsKernel out;
  out.rows_ = rows;
  out.kind_ = kernel.kind;
  std::map<ValueId, std::size_t> position;
  std::map<ValueId, std::size_t> prefix; // leading dims collapsed into the rows (0: none)
  auto add = [&](ValueId id, Value value) {
    const Shape& s = g.type(id).shape;
    std::size_t k = rows_prefix(s, rows);
    value.dtype = g.type(id).dtype;
    value.spans_rows = k > 0;
    value.inner.assign(s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
    prefix[id] = k;
    position[id] = out.values_.size();
    out.values_.push_back(std::move(value));
  };
  // Buffers, then the views of buffers the body reads, then the body.
  for (ValueId r : kernel.reads) {
    out.reads_.push_back(out.values_.size());
    add(r, Value{.materialized = plan.materialized[r]});
    out.values_.back().view_of = out.values_.size() - 1;
  }
  auto in_body = [&](ValueId v) {
    return std::find(kernel.body.begin(), kernel.body.end(), v) != kernel.body.end();
  };
  for (ValueId v : kernel.body)
    for (ValueId in : g.node(v).inputs) {
      if (in_body(in) || position.contains(in)) continue;
      auto buffer = position.find(plan.view_of[in]);
      if (buffer == position.end()) return std::nullopt;
      add(in, Value{.view_of = buffer->second});
    }
  for (ValueId v : kernel.body) {
    const Node& n = g.node(v);
    Value value{.op = n.op, .attrs = n.attrs, .materialized = plan.materialized[v], .body = true};
    for (ValueId in : n.inputs)
      value.inputs.push_back(position.at(in));
    add(v, std::move(value));
    Value& t = out.values_.back();
    t.view_of = out.values_.size() - 1;
    if (plan.view_of[v] != v) {
      auto buffer = position.find(plan.view_of[v]);
      if (buffer == position.end()) return std::nullopt;
      t.view_of = buffer->second;
    }
    std::size_t k = prefix.at(v);
    const Shape& s = n.type.shape;
    auto operand = [&](std::size_t i) { return g.type(n.inputs[i]).shape; };
    auto k_of = [&](std::size_t i) { return prefix.at(n.inputs[i]); };
    // Dims from `k` on, renumbered after the collapsed rows (or kept when nothing spans them).
    auto inner_axis = [&](int64_t axis, std::size_t kk) {
      return kk ? axis - static_cast<int64_t>(kk) + 1 : axis;
    };
    if (elementwise(n.op)) {
      for (std::size_t i = 0; i < n.inputs.size(); ++i)
        if (operand(i) != s) return std::nullopt;
      continue;
    }
    switch (n.op) {
    case OpId::constant: continue;
    case OpId::iota: {
      int64_t axis = *normalize_axis(n.attrs.ints2[0], s.size());
      if (k && axis < static_cast<int64_t>(k)) return std::nullopt; // the row's own index
      t.attrs.ints2 = {inner_axis(axis, k)};
      continue;
    }
    case OpId::reshape:
      if ((k == 0) != (k_of(0) == 0)) return std::nullopt;
      continue;
    case OpId::broadcast: {
      Shape in = operand(0);
      std::size_t offset = s.size() - in.size(), kin = k_of(0);
      if (kin) { // the operand spans the same rows, dim for dim
        if (!k || offset != 0 || kin != k || !std::equal(in.begin(), in.begin() + kin, s.begin()))
          return std::nullopt;
      } else if (k && offset < k) { // a row-independent operand must stretch over the rows
        return std::nullopt;
      }
      continue;
    }
    case OpId::permute: {
      if (k != k_of(0)) return std::nullopt;
      if (!k) continue;
      std::vector<int64_t> perm{0};
      for (std::size_t d = 0; d < s.size(); ++d) {
        if (d < k && n.attrs.ints[d] != static_cast<int64_t>(d)) return std::nullopt;
        if (d >= k) perm.push_back(inner_axis(n.attrs.ints[d], k));
      }
      t.attrs.ints = perm;
      continue;
    }
    case OpId::slice:
    case OpId::pad: {
      std::size_t kin = k_of(0);
      if (k != kin) return std::nullopt;
      if (!k) continue;
      Shape in = operand(0);
      if (!std::equal(in.begin(), in.begin() + k, s.begin())) return std::nullopt;
      for (std::size_t d = 0; d < k; ++d)
        if (n.attrs.ints[d] != 0 || n.attrs.ints2[d] != (n.op == OpId::slice ? in[d] : 0))
          return std::nullopt;
      auto drop = [&](std::vector<int64_t> v) {
        v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k));
        v.insert(v.begin(), 0); // the slice's limit on the rows is filled in per instance
        return v;
      };
      t.attrs.ints = drop(n.attrs.ints);
      t.attrs.ints2 = drop(n.attrs.ints2);
      continue;
    }
    case OpId::concat: {
      int64_t axis = *normalize_axis(n.attrs.ints[0], s.size());
      for (std::size_t i = 0; i < n.inputs.size(); ++i)
        if (k_of(i) != k || !std::equal(s.begin(), s.begin() + k, operand(i).begin()))
          return std::nullopt;
      if (k && axis < static_cast<int64_t>(k)) return std::nullopt;
      t.attrs.ints = {inner_axis(axis, k)};
      continue;
    }
    case OpId::gather: {
      std::size_t index_rank = operand(1).size();
      if (k_of(0)) return std::nullopt; // the table never spans the rows
      if (k_of(1) != (k ? index_rank : 0) || (k && k != index_rank)) return std::nullopt;
      continue;
    }
    case OpId::reduce_sum:
    case OpId::reduce_max:
    case OpId::reduce_min: {
      std::size_t kin = k_of(0);
      if (!kin) {
        if (k) return std::nullopt;
        continue;
      }
      const std::vector<int64_t>& axes = n.attrs.ints;
      bool rows_kept = std::all_of(axes.begin(), axes.end(),
                                   [&](int64_t a) { return a >= static_cast<int64_t>(kin); });
      bool rows_folded = axes.size() >= kin;
      for (std::size_t i = 0; i < kin && rows_folded; ++i)
        rows_folded = axes[i] == static_cast<int64_t>(i);
      rows_folded = rows_folded && axes.size() == kin; // a column: all rows, no inner dim
      std::vector<int64_t> remapped;
      if (rows_kept && k == kin) {
        for (int64_t a : axes)
          remapped.push_back(inner_axis(a, kin));
      } else if (rows_folded && k == 0) {
        remapped = {0};
      } else {
        return std::nullopt;
      }
      t.attrs.ints = remapped;
      continue;
    }
    case OpId::scatter_add: {
      std::size_t index_rank = operand(0).size();
      if (k || k_of(0) != index_rank || k_of(1) != index_rank) return std::nullopt;
      continue;
    }
    default: return std::nullopt;
    }
  }
  out.root_ = position.at(kernel.root);
  out.overwrites_ = position.at(kernel.overwrites);
  for (ValueId e : kernel.extra_outputs)
    out.extra_outputs_.push_back(position.at(e));
  // The instance must be a well-typed graph; a remapping this file gets wrong for some kernel
  // costs that kernel its reuse (it is compiled for its shape), never a wrong result.
  RowsInstance check = out.instance(rows);
  try {
    verify(*check.graph);
  } catch (const VerifyError&) {
    return std::nullopt;
  }
  return out;
}

RowsInstance RuntimeRowsKernel::instance(int64_t rows) const {
  RowsInstance made;
  made.graph = std::make_unique<Graph>();
  Graph& g = *made.graph;
  std::vector<ValueId> id;
  for (std::size_t i = 0; i < values_.size(); ++i) {
    const Value& v = values_[i];
    Shape shape = v.inner;
    if (v.spans_rows) shape.insert(shape.begin(), rows);
    TensorType type{v.dtype, shape};
    if (!v.body) {
      id.push_back(g.add_input("buffer" + std::to_string(i), type));
      continue;
    }
    Node n{.op = v.op, .type = type, .attrs = v.attrs};
    for (std::size_t in : v.inputs)
      n.inputs.push_back(id[in]);
    switch (v.op) {
    case OpId::constant:
    case OpId::iota:
    case OpId::reshape:
    case OpId::broadcast: n.attrs.ints = shape; break;
    case OpId::slice:
      if (v.spans_rows) n.attrs.ints2[0] = rows;
      break;
    default: break;
    }
    id.push_back(g.add_recomputed(std::move(n)));
  }
  FusionPlan& plan = made.plan;
  plan.graph = &g;
  plan.materialized.assign(g.size(), false);
  plan.view_of.resize(g.size());
  std::iota(plan.view_of.begin(), plan.view_of.end(), ValueId{0});
  Kernel k;
  k.kind = kind_;
  for (std::size_t i = 0; i < values_.size(); ++i) {
    plan.materialized[id[i]] = values_[i].materialized;
    plan.view_of[id[i]] = id[values_[i].view_of];
    if (values_[i].body) k.body.push_back(id[i]);
  }
  for (std::size_t r : reads_)
    k.reads.push_back(id[r]);
  k.root = id[root_];
  k.overwrites = id[overwrites_];
  for (std::size_t e : extra_outputs_)
    k.extra_outputs.push_back(id[e]);
  plan.kernels.push_back(std::move(k));
  return made;
}

} // namespace sinter
