// jit/passes/runtime_rows.hpp — kernels whose row count is a launch parameter: a fused kernel's
// values seen as [rows, ...], so one compiled kernel serves every batch and sequence length
#pragma once
#include "jit/passes/fuse.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
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

/// A shape number of a RuntimeRowsKernel: c·size^power (power 0: the constant c); `at` gives -1
/// where the value overflows int64.
struct SizeTerm {
  int64_t c = 0;
  int power = 0;
  int64_t at(int64_t size) const;
  bool operator==(const SizeTerm&) const = default;
};

/// A kernel with one runtime size: the same code serves every value of it, the size read from
/// a launch parameter (the CUDA backend's `i64 rows`), so a recompile for another batch size
/// or sequence length reuses the kernel. Two ways to find one:
///  - `of`: a loop, row, reduce or scatter kernel whose work splits into `rows` independent
///    rows of the same inner work: each value either spans the rows (its leading dims
///    multiply to `rows`; they collapse into one dim) or does not depend on them at all (a
///    bias, a gather's table, a column reduction's result), and every op keeps to whole rows
///    (index algebra moves only inner dims; reductions fold the inner dims of a row or all
///    the rows of a column). The size is the row count.
///  - `unify`: the same kernel compiled for two shapes (two shape buckets: the same ops on
///    the same buffers, numbers aside). Every number that differs is c·x^p in one and c·x'^p
///    in the other, with x and x' the greatest common divisors of the differing numbers (a
///    sequence length, say); the size is x. Any index algebra qualifies: position embeddings,
///    masks, softmax over keys, head permutes.
/// `instance(n)` is the kernel at size n (the original at `size()`). The code generated for it
/// depends on n only through shape numbers, which a backend reads from its parameter; a
/// backend checks that (two instances must give the same code) and refuses the rest.
class RuntimeRowsKernel {
public:
  /// nullopt when the kernel does not split into rows that way, or has one row.
  static std::optional<RuntimeRowsKernel> of(const FusionPlan& plan, const Kernel& kernel);
  /// The kernel with every number constant: what `unify` compares.
  static RuntimeRowsKernel capture(const FusionPlan& plan, const Kernel& kernel);
  /// nullopt unless `now` and `before` are one kernel at two sizes (see the class comment).
  static std::optional<RuntimeRowsKernel> unify(const RuntimeRowsKernel& now,
                                                const RuntimeRowsKernel& before);

  /// The size `instance` rebuilds the kernel at (the row count, or `unify`'s x).
  int64_t rows() const { return rows_; }
  RowsInstance instance(int64_t rows) const;
  /// Everything but the numbers: kernels alike in it may unify.
  std::string signature() const;
  /// Whether every number (shapes, ints, ints2) is the same term in both.
  bool same_numbers(const RuntimeRowsKernel& other) const;

  /// A node of the template: the kernel's buffers first (`read` >= 0: position in `reads`;
  /// outside operands: views of a buffer), then its body in order.
  struct Value {
    OpId op = OpId::input;
    DType dtype = DType::f32;
    std::vector<SizeTerm> shape;
    std::vector<std::size_t> inputs; ///< template positions
    Attrs attrs;                     ///< ints and ints2 come from the terms below
    std::vector<SizeTerm> ints, ints2;
    bool materialized = false;
    std::size_t view_of = 0; ///< template position of the buffer it is a view of (or itself)
    bool body = false;
  };

private:
  /// `of` at `rows` rows, the values in `independent` taken as independent of them. On failure,
  /// `misread` names a value taken to span the rows that an op shows cannot.
  static std::optional<RuntimeRowsKernel> of_rows(const FusionPlan& plan, const Kernel& kernel,
                                                  int64_t rows,
                                                  const std::set<ValueId>& independent,
                                                  std::optional<ValueId>& misread);
  /// Adds the kernel's reads, then the operands its body takes from outside (views of a read),
  /// through `add` (which records `position`). False when an operand is no view of a buffer.
  bool add_buffers(const FusionPlan& plan, const Kernel& kernel,
                   std::map<ValueId, std::size_t>& position,
                   const std::function<void(ValueId, Value)>& add);
  /// Adds body node `v` (its inputs added before) through `add`, its view_of resolved. False
  /// when it is a view of no buffer of the kernel.
  bool add_body_value(const FusionPlan& plan, ValueId v, std::map<ValueId, std::size_t>& position,
                      const std::function<void(ValueId, Value)>& add);

  /// Whether every value's element count stays well inside int64 at `size` (read from the
  /// terms, nothing built).
  bool sizes_fit(int64_t size) const;

  int64_t rows_ = 0;
  std::string signature_; ///< capture's, computed once (unify and lookups compare it often)
  bool complete_ = true;  ///< false: an operand of no buffer (capture only; never unifies)
  std::vector<Value> values_;
  KernelKind kind_ = KernelKind::loop;
  std::size_t root_ = 0, overwrites_ = 0;
  std::vector<std::size_t> extra_outputs_, reads_;
};

} // namespace sinter
