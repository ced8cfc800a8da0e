// jit/passes/split_reductions.cpp — long column reductions split in two: partial sums over
// groups of rows, then a short reduction of the partials (more blocks for a GPU)
#include "jit/passes/fuse.hpp"
#include "jit/passes/passes.hpp"
#include "jit/passes/reshapes.hpp"

#include "ops/registry.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace sinter {

int64_t column_reduction_splits(int64_t rows, int64_t columns, int64_t bytes,
                                const ColumnSplitOptions& options, int64_t element_bytes) {
  if (rows < options.min_rows || bytes < options.min_bytes) return 1;
  int64_t lane_columns =
      std::max<int64_t>(1, options.lane_bytes / std::max<int64_t>(1, element_bytes));
  while (lane_columns > 1 && columns % lane_columns != 0)
    lane_columns /= 2;
  int64_t block_columns = options.columns_per_block * lane_columns;
  int64_t tiles = (columns + block_columns - 1) / block_columns;
  if (tiles >= options.target_blocks) return 1;
  int64_t want = (options.target_blocks + tiles - 1) / tiles, splits = 1;
  while (splits < want)
    splits *= 2;
  while (splits > 1 && (rows % splits != 0 || rows / splits < options.min_rows_per_split))
    splits /= 2;
  return splits;
}

namespace {

/// Whether reduction `n` (operand shape `xs`) folds leading axes and keeps at least the last
/// one: each output is a column.
bool reduces_leading_axes(const Node& n, const Shape& xs) {
  const std::vector<int64_t>& axes = n.attrs.ints;
  if (axes.empty() || axes.size() >= xs.size()) return false;
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != static_cast<int64_t>(i)) return false;
  return true;
}

/// The row groups node `n` (operand shape `xs`) splits into, or 1.
int64_t splits_of(const Node& n, const Shape& xs, DType operand, DType loaded,
                  const ColumnSplitOptions& options) {
  if (n.op != OpId::reduce_sum && n.op != OpId::reduce_max && n.op != OpId::reduce_min) return 1;
  if (!reduces_leading_axes(n, xs)) return 1;
  auto leading = static_cast<std::ptrdiff_t>(n.attrs.ints.size());
  int64_t rows = std::accumulate(xs.begin(), xs.begin() + leading, int64_t{1}, std::multiplies<>());
  int64_t bytes = numel(xs) * static_cast<int64_t>(dtype_bytes(operand));
  return column_reduction_splits(rows, xs.back(), bytes, options,
                                 static_cast<int64_t>(dtype_bytes(loaded)));
}

/// The reductions a GEMM may absorb as its bias-gradient epilogue (ColumnSplitOptions::
/// gemm_sums_columns): those to leave whole.
std::set<const Node*> gemm_absorbable(const Graph& g, const ColumnSplitOptions& options) {
  std::set<const Node*> keep;
  if (!options.gemm_sums_columns) return keep;
  // The B operands of non-batched matmuls, up to reshapes, with the product's type.
  std::map<ValueId, DType> b_sources;
  for (ValueId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op == OpId::matmul && g.type(id).shape.size() == 2)
      b_sources.emplace(through_reshapes(g, n.inputs[1]), g.type(id).dtype);
  }
  for (ValueId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op != OpId::reduce_sum) continue;
    ValueId x = before_widening(g, n.inputs[0]);
    auto found = b_sources.find(through_reshapes(g, x));
    if (found != b_sources.end() && found->second == g.type(x).dtype &&
        options.gemm_sums_columns(found->second, n.type.dtype))
      keep.insert(&n);
  }
  return keep;
}

/// The values `v`'s elementwise cone starts from: the inputs and kernel results (reductions,
/// GEMMs, ...) it reads through ops that fuse into one kernel.
std::set<ValueId> cone_sources(const Graph& g, ValueId v) {
  constexpr std::size_t max_visited = 512; // a cone is a few dozen ops: stop at pathological ones
  std::set<ValueId> sources, seen;
  std::vector<ValueId> stack(g.node(v).inputs.begin(), g.node(v).inputs.end());
  while (!stack.empty() && seen.size() < max_visited) {
    ValueId u = stack.back();
    stack.pop_back();
    if (!seen.insert(u).second) continue;
    const Node& n = g.node(u);
    if (n.op == OpId::input || op_def(n.op).kernel_kind != KernelKind::loop) {
      sources.insert(u);
      continue;
    }
    stack.insert(stack.end(), n.inputs.begin(), n.inputs.end());
  }
  return sources;
}

/// How many groups of consecutive rows a row kernel over `rows` rows sums its column partials
/// in (ColumnSplitOptions::row_groups), or 0.
int64_t groups_of_rows(int64_t rows, const ColumnSplitOptions& options) {
  const int64_t fewest_rows = std::max<int64_t>(1, options.row_group_min_rows);
  // Too few rows for row_groups_min groups: groups of the fewest rows each, so that a plan at
  // any row count up to there (a shape bucket) has the same kernels, their group count a
  // runtime size.
  if (rows < options.row_groups_min * fewest_rows)
    return rows % fewest_rows == 0 && rows / fewest_rows >= 2 ? rows / fewest_rows : 0;
  for (int64_t groups =
           std::min(options.row_groups, rows / std::max<int64_t>(1, options.row_group_min_rows));
       groups >= std::max<int64_t>(2, options.row_groups_min); --groups)
    if (rows % groups == 0) return groups;
  return 0;
}

/// For each reduce_sum of leading axes that a row kernel over the same rows can take in as
/// partial sums per group of rows (ColumnSplitOptions::row_groups), its number of groups.
std::map<const Node*, int64_t> row_groups(const Graph& g, const ColumnSplitOptions& options) {
  std::map<const Node*, int64_t> out;
  if (options.row_groups <= 0) return out;
  // The values each row geometry's last-axis reductions start from.
  std::map<std::pair<int64_t, int64_t>, std::set<ValueId>> row_sources;
  for (ValueId id = 0; id < g.size(); ++id) {
    if (!is_row_reduction(g, id)) continue;
    const Shape& xs = g.type(g.node(id).inputs[0]).shape;
    std::set<ValueId> sources = cone_sources(g, id);
    row_sources[{numel(xs) / std::max<int64_t>(1, xs.back()), xs.back()}].insert(sources.begin(),
                                                                                 sources.end());
  }
  for (ValueId id = 0; id < g.size(); ++id) {
    const Node& n = g.node(id);
    if (n.op != OpId::reduce_sum || n.inputs.empty()) continue;
    const Shape& xs = g.type(n.inputs[0]).shape;
    // Every axis but the last: rows of `length` columns.
    if (!reduces_leading_axes(n, xs) || n.attrs.ints.size() + 1 != xs.size()) continue;
    int64_t length = xs.back(), rows = numel(xs) / std::max<int64_t>(1, length);
    int64_t groups = groups_of_rows(rows, options);
    if (length > options.row_group_max_length || groups == 0) continue;
    auto found = row_sources.find({rows, length});
    if (found == row_sources.end()) continue;
    std::set<ValueId> sources = cone_sources(g, id);
    bool shared = std::any_of(sources.begin(), sources.end(),
                              [&](ValueId s) { return found->second.count(s) > 0; });
    if (shared) out[&n] = groups;
  }
  return out;
}

} // namespace

Graph split_column_reductions(const Graph& graph, const ColumnSplitOptions& options) {
  const std::set<const Node*> absorbable = gemm_absorbable(graph, options);
  const std::map<const Node*, int64_t> grouped = row_groups(graph, options);
  // The operand as its kernel loads it: before a widening cast (a bf16 gradient summed in f32).
  auto splits_for = [&](const Node& n, const Shape& xs, DType operand) -> int64_t {
    if (absorbable.count(&n)) return 1;
    auto group = grouped.find(&n);
    DType loaded = graph.type(before_widening(graph, n.inputs[0])).dtype;
    return group != grouped.end() ? group->second : splits_of(n, xs, operand, loaded, options);
  };
  bool any = false;
  for (ValueId id = 0; id < graph.size() && !any; ++id) {
    const Node& n = graph.node(id);
    any = !n.inputs.empty() &&
          splits_for(n, graph.type(n.inputs[0]).shape, graph.type(n.inputs[0]).dtype) > 1;
  }
  if (!any) return graph; // a rebuild would also merge values recomputed on purpose
  return rebuild(graph, [&](const Node& n, std::span<const Value> operands) -> Value {
    if (operands.empty()) return {};
    const Shape& xs = operands[0].shape();
    int64_t splits = splits_for(n, xs, operands[0].dtype());
    if (splits < 2) return {};
    auto leading = static_cast<std::ptrdiff_t>(n.attrs.ints.size());
    int64_t rows =
        std::accumulate(xs.begin(), xs.begin() + leading, int64_t{1}, std::multiplies<>());
    Shape rest(xs.begin() + leading, xs.end());
    // x[rows, rest] as [splits, rows / splits, rest]: partials over axis 1, then over axis 0.
    Shape grouped{splits, rows / splits};
    grouped.insert(grouped.end(), rest.begin(), rest.end());
    Value x = reshape(operands[0], grouped);
    // 16-bit partials would round each group's sum; they are kept in f32.
    DType out = n.type.dtype;
    bool widen = out == DType::bf16 || out == DType::f16;
    if (widen) x = cast(x, DType::f32);
    Value partial = emit(n.op, {x}, Attrs{.ints = {1}});
    Value total = emit(n.op, {partial}, Attrs{.ints = {0}});
    return widen ? cast(total, out) : total;
  });
}

} // namespace sinter
