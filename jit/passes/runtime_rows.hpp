// jit/passes/runtime_rows.hpp — kernels whose row count is a launch parameter: a fused kernel's
// values seen as [rows, ...], so one compiled kernel serves every batch and sequence length
#pragma once
#include "jit/passes/fuse.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace sinter {

/// One instance of a RuntimeRowsKernel: a graph of the kernel's values alone (its buffers as
/// inputs, then its body) in which every value that spans the rows has the shape
/// [rows, inner...], and a plan whose one kernel is the kernel over that graph.
struct RowsInstance {
  std::unique_ptr<Graph> graph;
  FusionPlan plan;
  const Kernel& kernel() const { return plan.kernels.front(); }
};

/// A loop, row, reduce or scatter kernel whose work splits into `rows` independent rows of the
/// same inner work: each value either spans the rows (its leading dims multiply to `rows`;
/// they collapse into one dim) or does not depend on them at all (a bias, a gather's table, a
/// column reduction's result), and every op keeps to whole rows (index algebra moves only
/// inner dims; reductions fold the inner dims of a row or all the rows of a column).
/// `instance(n)` is the same kernel for `n` rows; the code generated for it depends on `n`
/// only through the loop bounds, which a backend can take from a parameter (the CUDA backend
/// does: a shape bucket's recompile then reuses it).
class RuntimeRowsKernel {
public:
  /// nullopt when the kernel does not split into rows that way, or has one row.
  static std::optional<RuntimeRowsKernel> of(const FusionPlan& plan, const Kernel& kernel);

  int64_t rows() const { return rows_; }
  RowsInstance instance(int64_t rows) const;

  /// A node of the template: the kernel's buffers first (`read` >= 0: position in `reads`;
  /// outside operands: views of a buffer), then its body in order.
  struct Value {
    OpId op = OpId::input;
    DType dtype = DType::f32;
    bool spans_rows = false; ///< shape [rows] + inner; otherwise `inner` is the whole shape
    Shape inner;
    std::vector<std::size_t> inputs; ///< template positions
    Attrs attrs;                     ///< remapped to the collapsed dims (shapes filled in later)
    bool materialized = false;
    std::size_t view_of = 0; ///< template position of the buffer it is a view of (or itself)
    bool body = false;
  };

private:
  int64_t rows_ = 0;
  std::vector<Value> values_;
  KernelKind kind_ = KernelKind::loop;
  std::size_t root_ = 0, overwrites_ = 0;
  std::vector<std::size_t> extra_outputs_, reads_;
};

} // namespace sinter
