// jit/passes/split_reductions.cpp — long column reductions split in two: partial sums over
// groups of rows, then a short reduction of the partials (more blocks for a GPU)
#include "jit/passes/passes.hpp"

#include "ops/registry.hpp"

#include <numeric>

namespace sinter {

int64_t column_reduction_splits(int64_t rows, int64_t columns, int64_t bytes,
                                const ColumnSplitOptions& options) {
  if (rows < options.min_rows || bytes < options.min_bytes) return 1;
  int64_t tiles = (columns + options.columns_per_block - 1) / options.columns_per_block;
  if (tiles >= options.target_blocks) return 1;
  int64_t want = (options.target_blocks + tiles - 1) / tiles, splits = 1;
  while (splits < want)
    splits *= 2;
  while (splits > 1 && (rows % splits != 0 || rows / splits < options.min_rows_per_split))
    splits /= 2;
  return splits;
}

namespace {

/// The row groups node `n` (operand shape `xs`) splits into, or 1.
int64_t splits_of(const Node& n, const Shape& xs, DType operand,
                  const ColumnSplitOptions& options) {
  if (n.op != OpId::reduce_sum && n.op != OpId::reduce_max && n.op != OpId::reduce_min) return 1;
  const std::vector<int64_t>& axes = n.attrs.ints;
  // Reductions of the leading axes that keep at least the last one: each output is a column.
  if (axes.empty() || axes.size() >= xs.size()) return 1;
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != static_cast<int64_t>(i)) return 1;
  auto leading = static_cast<std::ptrdiff_t>(axes.size());
  int64_t rows = std::accumulate(xs.begin(), xs.begin() + leading, int64_t{1}, std::multiplies<>());
  int64_t bytes = numel(xs) * static_cast<int64_t>(dtype_bytes(operand));
  return column_reduction_splits(rows, xs.back(), bytes, options);
}

} // namespace

Graph split_column_reductions(const Graph& graph, const ColumnSplitOptions& options) {
  bool any = false;
  for (ValueId id = 0; id < graph.size() && !any; ++id) {
    const Node& n = graph.node(id);
    any = !n.inputs.empty() &&
          splits_of(n, graph.type(n.inputs[0]).shape, graph.type(n.inputs[0]).dtype, options) > 1;
  }
  if (!any) return graph; // a rebuild would also merge values recomputed on purpose
  return rebuild(graph, [&](const Node& n, std::span<const Value> operands) -> Value {
    if (operands.empty()) return {};
    const Shape& xs = operands[0].shape();
    int64_t splits = splits_of(n, xs, operands[0].dtype(), options);
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
