// jit/passes/runtime_rows.cpp — a kernel's values seen as [rows, inner...], checked op by op
#include "jit/passes/runtime_rows.hpp"

#include "ops/registry.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
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
    // Column partials: one block per group of rows, the grid fixed by the row count.
    RowLayout layout = row_layout(g, k);
    return layout.reductions.empty() || !layout.partials.empty()
               ? 0
               : numel(g.type(layout.reductions.front()).shape);
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

/// Whether an op's ints (`list` 0) or ints2 (1) are sizes (shapes, starts, limits, pads), which
/// may scale with a changed dim; axes, permutations and the rest never do.
bool size_valued(OpId op, int list) {
  switch (op) {
  case OpId::constant:
  case OpId::reshape:
  case OpId::broadcast:
  case OpId::iota:
  case OpId::scatter_add: return list == 0;
  case OpId::slice:
  case OpId::pad: return true;
  default: return false;
  }
}

std::vector<SizeTerm> constant_terms(const std::vector<int64_t>& numbers) {
  std::vector<SizeTerm> out;
  for (int64_t n : numbers)
    out.push_back({n, 0});
  return out;
}

std::vector<int64_t> evaluate(const std::vector<SizeTerm>& terms, int64_t size) {
  std::vector<int64_t> out;
  for (const SizeTerm& t : terms)
    out.push_back(t.at(size));
  return out;
}

} // namespace

int64_t SizeTerm::at(int64_t size) const {
  int64_t v = c;
  for (int p = 0; p < power; ++p)
    if (__builtin_mul_overflow(v, size, &v)) return -1; // no size: refused where checked
  return v;
}

namespace {

/// Whether the kernel's instance at `size` is a well-typed graph, every numel in range.
bool well_typed(const RuntimeRowsKernel& kernel, int64_t size) {
  RowsInstance check = kernel.instance(size);
  try {
    verify(*check.graph);
  } catch (const VerifyError&) {
    return false;
  }
  return true;
}

/// A size above any a backend compiles an instance at (the CUDA backend's are about a million):
/// every value's element count must stay well inside int64 there.
constexpr int64_t largest_emitted_size = int64_t{1} << 21;

} // namespace

bool RuntimeRowsKernel::sizes_fit(int64_t size) const {
  for (const Value& v : values_) {
    int64_t total = 1;
    for (const SizeTerm& t : v.shape) {
      int64_t d = t.at(size); // -1 where it overflows
      if (d < 0 || __builtin_mul_overflow(total, d, &total) || total > (int64_t{1} << 60))
        return false;
    }
  }
  return true;
}

std::optional<RuntimeRowsKernel> RuntimeRowsKernel::of(const FusionPlan& plan,
                                                       const Kernel& kernel) {
  int64_t rows = kernel_rows(*plan.graph, kernel);
  // An output stored over a donated input aliases it: the instances would not say so.
  if (rows <= 1 || !kernel.over_inputs.empty()) return std::nullopt;
  // A value whose leading dims multiply to the row count by coincidence (a bias as long as the
  // rows are many) is first taken to span them; where an op shows it cannot, it is taken as
  // independent of the rows and the kernel read again.
  constexpr int max_rereads = 8;
  std::set<ValueId> independent;
  for (int attempt = 0; attempt <= max_rereads; ++attempt) {
    std::optional<ValueId> misread;
    if (auto out = of_rows(plan, kernel, rows, independent, misread)) return out;
    if (!misread || !independent.insert(*misread).second) return std::nullopt;
  }
  return std::nullopt;
}

std::optional<RuntimeRowsKernel> RuntimeRowsKernel::of_rows(const FusionPlan& plan,
                                                            const Kernel& kernel, int64_t rows,
                                                            const std::set<ValueId>& independent,
                                                            std::optional<ValueId>& misread) {
  const Graph& g = *plan.graph;
  RuntimeRowsKernel out;
  out.rows_ = rows;
  out.kind_ = kernel.kind;
  std::map<ValueId, std::size_t> position;
  std::map<ValueId, std::size_t> prefix; // leading dims collapsed into the rows (0: none)
  auto add = [&](ValueId id, Value value) {
    const Shape& s = g.type(id).shape;
    std::size_t k = independent.contains(id) ? 0 : rows_prefix(s, rows);
    value.dtype = g.type(id).dtype;
    if (k > 0) value.shape.push_back({1, 1});
    for (std::size_t d = k; d < s.size(); ++d)
      value.shape.push_back({s[d], 0});
    prefix[id] = k;
    position[id] = out.values_.size();
    out.values_.push_back(std::move(value));
  };
  // Buffers, then the views of buffers the body reads, then the body.
  if (!out.add_buffers(plan, kernel, position, add)) return std::nullopt;
  for (ValueId v : kernel.body) {
    if (!out.add_body_value(plan, v, position, add)) return std::nullopt;
    const Node& n = g.node(v);
    Value& t = out.values_.back();
    std::size_t k = prefix.at(v);
    const Shape& s = n.type.shape;
    auto operand = [&](std::size_t i) { return g.type(n.inputs[i]).shape; };
    auto k_of = [&](std::size_t i) { return prefix.at(n.inputs[i]); };
    // Dims from `k` on, renumbered after the collapsed rows (or kept when nothing spans them).
    auto inner_axis = [&](int64_t axis, std::size_t kk) {
      return kk ? axis - static_cast<int64_t>(kk) + 1 : axis;
    };
    // An op's value independent of the rows (taken so from a later op) makes its operands so.
    auto independent_operand = [&](std::size_t i) {
      if (k == 0 && k_of(i) > 0 && independent.contains(v)) misread = n.inputs[i];
      return misread.has_value();
    };
    // And the value of an op all of whose operands are independent of the rows is so too.
    auto operands_independent = [&] {
      bool all = k > 0 && std::all_of(n.inputs.begin(), n.inputs.end(),
                                      [&](ValueId in) { return prefix.at(in) == 0; });
      if (all) misread = v;
      return all;
    };
    if (elementwise(n.op)) {
      for (std::size_t i = 0; i < n.inputs.size(); ++i)
        if (operand(i) != s || independent_operand(i)) return std::nullopt;
      if (operands_independent()) return std::nullopt;
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
      if ((k == 0) != (k_of(0) == 0)) {
        if (!independent_operand(0)) operands_independent();
        return std::nullopt;
      }
      continue;
    case OpId::broadcast: {
      Shape in = operand(0);
      std::size_t offset = s.size() - in.size(), kin = k_of(0);
      if (kin) { // the operand spans the same rows, dim for dim
        // Stretched over every row dim: the operand cannot be one of the rows.
        if (offset != 0 && offset >= k) misread = n.inputs[0];
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
        if (rows_folded) misread = v; // a column's result, as long as the rows are many
        return std::nullopt;
      }
      t.attrs.ints = remapped;
      continue;
    }
    case OpId::scatter_add: {
      std::size_t index_rank = operand(0).size();
      if (k && k_of(0) == index_rank && k_of(1) == index_rank) misread = v; // the table
      if (k || k_of(0) != index_rank || k_of(1) != index_rank) return std::nullopt;
      continue;
    }
    default: return std::nullopt;
    }
  }
  // Shape-valued attributes follow the values' shapes; a slice over the rows ends at the last.
  for (Value& v : out.values_) {
    if (!v.body) continue;
    switch (v.op) {
    case OpId::constant:
    case OpId::iota:
    case OpId::reshape:
    case OpId::broadcast: v.ints = v.shape; break;
    default: v.ints = constant_terms(v.attrs.ints);
    }
    v.ints2 = constant_terms(v.attrs.ints2);
    if (v.op == OpId::slice && !v.shape.empty() && v.shape[0].power == 1) v.ints2[0] = {1, 1};
  }
  out.root_ = position.at(kernel.root);
  out.overwrites_ = position.at(kernel.overwrites);
  for (ValueId e : kernel.extra_outputs)
    out.extra_outputs_.push_back(position.at(e));
  // The instance must be a well-typed graph; a remapping this file gets wrong for some kernel
  // costs that kernel its reuse (it is compiled for its shape), never a wrong result.
  if (!out.sizes_fit(largest_emitted_size) || !well_typed(out, rows)) return std::nullopt;
  return out;
}

bool RuntimeRowsKernel::add_buffers(const FusionPlan& plan, const Kernel& kernel,
                                    std::map<ValueId, std::size_t>& position,
                                    const std::function<void(ValueId, Value)>& add) {
  const Graph& g = *plan.graph;
  for (ValueId r : kernel.reads) {
    reads_.push_back(values_.size());
    add(r, Value{.materialized = plan.materialized[r]});
    values_.back().view_of = values_.size() - 1;
  }
  auto in_body = [&](ValueId v) {
    return std::find(kernel.body.begin(), kernel.body.end(), v) != kernel.body.end();
  };
  for (ValueId v : kernel.body)
    for (ValueId in : g.node(v).inputs) {
      if (in_body(in) || position.contains(in)) continue;
      auto buffer = position.find(plan.view_of[in]);
      if (buffer == position.end()) return false;
      add(in, Value{.view_of = buffer->second});
    }
  return true;
}

bool RuntimeRowsKernel::add_body_value(const FusionPlan& plan, ValueId v,
                                       std::map<ValueId, std::size_t>& position,
                                       const std::function<void(ValueId, Value)>& add) {
  const Node& n = plan.graph->node(v);
  Value value{.op = n.op, .attrs = n.attrs, .materialized = plan.materialized[v], .body = true};
  for (ValueId in : n.inputs)
    value.inputs.push_back(position.at(in));
  add(v, std::move(value));
  Value& t = values_.back();
  t.view_of = values_.size() - 1;
  if (plan.view_of[v] == v) return true;
  auto buffer = position.find(plan.view_of[v]);
  if (buffer == position.end()) return false;
  t.view_of = buffer->second;
  return true;
}

RuntimeRowsKernel RuntimeRowsKernel::capture(const FusionPlan& plan, const Kernel& kernel) {
  const Graph& g = *plan.graph;
  RuntimeRowsKernel out;
  out.kind_ = kernel.kind;
  std::map<ValueId, std::size_t> position;
  auto add = [&](ValueId id, Value value) {
    value.dtype = g.type(id).dtype;
    value.shape = constant_terms(g.type(id).shape);
    position[id] = out.values_.size();
    out.values_.push_back(std::move(value));
  };
  // A kernel with an operand of no buffer, or an output stored over a donated input, is kept
  // whole but never unifies.
  out.complete_ = kernel.over_inputs.empty() && out.add_buffers(plan, kernel, position, add);
  if (!out.complete_) return out;
  for (ValueId v : kernel.body)
    if (!out.add_body_value(plan, v, position, add)) {
      out.complete_ = false;
      return out;
    }
  for (Value& v : out.values_) {
    v.ints = constant_terms(v.attrs.ints);
    v.ints2 = constant_terms(v.attrs.ints2);
  }
  out.root_ = position.at(kernel.root);
  out.overwrites_ = position.at(kernel.overwrites);
  for (ValueId e : kernel.extra_outputs)
    out.extra_outputs_.push_back(position.at(e));
  out.signature_ = out.signature();
  return out;
}

std::string RuntimeRowsKernel::signature() const {
  if (!signature_.empty()) return signature_;
  std::string out = "kind " + std::to_string(static_cast<int>(kind_)) + ";root " +
                    std::to_string(root_) + ";overwrites " + std::to_string(overwrites_);
  for (std::size_t e : extra_outputs_)
    out += ";extra " + std::to_string(e);
  for (std::size_t r : reads_)
    out += ";read " + std::to_string(r);
  for (const Value& v : values_) {
    out += "\n" + std::to_string(static_cast<int>(v.op)) + " " +
           std::to_string(static_cast<int>(v.dtype)) + " rank " + std::to_string(v.shape.size()) +
           " ints " + std::to_string(v.ints.size()) + " ints2 " + std::to_string(v.ints2.size()) +
           " real " + std::to_string(v.attrs.real) + " flag " + std::to_string(v.attrs.flag) +
           " dtype " + std::to_string(static_cast<int>(v.attrs.dtype)) + " view " +
           std::to_string(v.view_of) + (v.materialized ? " m" : "") + (v.body ? " b" : "") + " <-";
    for (std::size_t in : v.inputs)
      out += " " + std::to_string(in);
    // Axes and permutations are part of what the kernel is; sizes are the numbers unify reads.
    for (int list : {0, 1})
      if (!size_valued(v.op, list))
        for (const SizeTerm& t : list == 0 ? v.ints : v.ints2)
          out += (list == 0 ? " i" : " j") + std::to_string(t.c);
  }
  return out;
}

bool RuntimeRowsKernel::same_numbers(const RuntimeRowsKernel& other) const {
  if (values_.size() != other.values_.size()) return false;
  for (std::size_t i = 0; i < values_.size(); ++i) {
    const Value &a = values_[i], &b = other.values_[i];
    if (a.shape != b.shape || a.ints != b.ints || a.ints2 != b.ints2) return false;
  }
  return true;
}

std::optional<RuntimeRowsKernel> RuntimeRowsKernel::unify(const RuntimeRowsKernel& now,
                                                          const RuntimeRowsKernel& before) {
  if (now.kind_ == KernelKind::attention || now.kind_ == KernelKind::gemm ||
      now.kind_ == KernelKind::collective || now.signature() != before.signature())
    return std::nullopt;
  if (!now.complete_ || !before.complete_) return std::nullopt;
  // Every size of both, in the same order (the signatures match: so do the other numbers).
  auto sizes_of = [](auto& v) {
    std::vector<decltype(&v.shape)> lists{&v.shape};
    if (size_valued(v.op, 0)) lists.push_back(&v.ints);
    if (size_valued(v.op, 1)) lists.push_back(&v.ints2);
    return lists;
  };
  auto numbers = [&](const RuntimeRowsKernel& k) {
    std::vector<int64_t> out;
    for (const Value& v : k.values_)
      for (const auto* terms : sizes_of(v))
        for (const SizeTerm& t : *terms)
          out.push_back(t.c);
    return out;
  };
  std::vector<int64_t> a = numbers(now), b = numbers(before);
  int64_t x = 0, x_before = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      x = std::gcd(x, a[i]);
      x_before = std::gcd(x_before, b[i]);
    }
  if (x < 2 || x_before < 2 || x == x_before) return std::nullopt;
  auto term = [&](int64_t va, int64_t vb) -> std::optional<SizeTerm> {
    if (va == vb) return SizeTerm{va, 0};
    int64_t pa = 1, pb = 1;
    for (int power = 1; power <= 3; ++power) {
      if (__builtin_mul_overflow(pa, x, &pa) || __builtin_mul_overflow(pb, x_before, &pb))
        return std::nullopt;
      if (va % pa != 0 || vb % pb != 0) return std::nullopt;
      if (va / pa == vb / pb) return SizeTerm{va / pa, power};
    }
    return std::nullopt;
  };
  RuntimeRowsKernel out = now;
  out.rows_ = x;
  std::size_t i = 0;
  for (Value& v : out.values_)
    for (auto* terms : sizes_of(v))
      for (SizeTerm& t : *terms) {
        std::optional<SizeTerm> made = term(a[i], b[i]);
        ++i;
        if (!made) return std::nullopt;
        t = *made;
      }
  // Only the instance at x must type-check: another kernel unifies to this one only where its
  // own shapes hold (a slice [0, x) of a 64-row table, say, stops at 64).
  if (!out.sizes_fit(largest_emitted_size) || !well_typed(out, x)) return std::nullopt;
  return out;
}

RowsInstance RuntimeRowsKernel::instance(int64_t rows) const {
  RowsInstance made;
  made.graph = std::make_unique<Graph>();
  Graph& g = *made.graph;
  std::vector<ValueId> id;
  for (std::size_t i = 0; i < values_.size(); ++i) {
    const Value& v = values_[i];
    TensorType type{v.dtype, evaluate(v.shape, rows)};
    if (!v.body) {
      id.push_back(g.add_input("buffer" + std::to_string(i), type));
      continue;
    }
    Node n{.op = v.op, .type = type, .attrs = v.attrs};
    n.attrs.ints = evaluate(v.ints, rows);
    n.attrs.ints2 = evaluate(v.ints2, rows);
    for (std::size_t in : v.inputs)
      n.inputs.push_back(id[in]);
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
