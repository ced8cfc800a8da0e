// ops/value.hpp — Value, a handle to a node under construction, and the op-building vocabulary
// Gradient and lowering rules are written with these functions, so they read like the maths.
#pragma once
#include "jit/ir/graph.hpp"

#include <initializer_list>
#include <span>

namespace sinter {

/// A node of a Graph being built. Cheap to copy; valid while the graph lives.
struct Value {
  Graph* graph = nullptr;
  ValueId id = 0;

  explicit operator bool() const { return graph != nullptr; }
  /// Valid only until the next node is added to the graph.
  const Node& node() const { return graph->node(id); }
  // By value on purpose: building a node may grow the arena and move earlier nodes.
  TensorType type() const { return graph->type(id); }
  DType dtype() const { return graph->type(id).dtype; }
  Shape shape() const { return graph->type(id).shape; }
  int64_t rank() const { return static_cast<int64_t>(graph->type(id).shape.size()); }
};

/// Builds one op node: checks operand types with the op's rule (ShapeError on mismatch, naming
/// the op, the operand types and the model path), broadcasts elementwise operands numpy-style.
Value emit(OpId op, std::span<const Value> operands, Attrs attrs = {});
Value emit(OpId op, std::initializer_list<Value> operands, Attrs attrs = {});
/// Same, naming the graph explicitly (needed by ops without operands: constant, iota).
Value emit(Graph& graph, OpId op, std::span<const Value> operands, Attrs attrs = {});

/// The graph a trace is building on this thread (nullptr: none). A trace runs on the thread
/// that called the traced function, so concurrent traces on other threads stay apart.
Graph*& active_trace_graph();

Value input(Graph& g, std::string name, TensorType type);
Value constant(Graph& g, double value, DType dtype, Shape shape = {});
/// A rank-0 constant with x's dtype (broadcasts against x in elementwise ops).
Value scalar_like(Value x, double value);
Value zeros_like(Value x);
Value ones_like(Value x);
Value iota(Graph& g, DType dtype, Shape shape, int64_t axis);

Value operator+(Value a, Value b);
Value operator-(Value a, Value b);
Value operator*(Value a, Value b);
Value operator/(Value a, Value b);
Value operator-(Value a);
Value operator+(Value a, double b);
Value operator-(Value a, double b);
Value operator*(Value a, double b);
Value operator/(Value a, double b);
Value operator+(double a, Value b);
Value operator-(double a, Value b);
Value operator*(double a, Value b);
Value operator/(double a, Value b);

// Elementwise builders, one per UNARY / BINARY / COMPARISON entry of ops/op_list.def.
#define SINTER_UNARY_PRIMITIVE(name) Value name(Value x);
#define SINTER_UNARY_COMPOSITE(name) Value name(Value x);
#define SINTER_BINARY_PRIMITIVE(name) Value name(Value a, Value b);
#define SINTER_COMPARISON_PRIMITIVE(name) Value name(Value a, Value b);
#define SINTER_COMPARISON_COMPOSITE(name) Value name(Value a, Value b);
#include "ops/op_list.def"
Value where(Value cond, Value a, Value b);
/// where with one branch a scalar: a rank-0 constant of the other branch's dtype.
Value where(Value cond, Value a, double b);
Value where(Value cond, double a, Value b);
Value cast(Value x, DType dtype);

/// Reductions over `axes` (negative axes count from the end; empty = all axes).
Value sum(Value x, std::vector<int64_t> axes = {}, bool keepdims = false);
Value mean(Value x, std::vector<int64_t> axes = {}, bool keepdims = false);
Value max(Value x, std::vector<int64_t> axes = {}, bool keepdims = false);
Value min(Value x, std::vector<int64_t> axes = {}, bool keepdims = false);
Value logsumexp(Value x, std::vector<int64_t> axes = {}, bool keepdims = false);
/// The index (i32) of the largest element along `axis`; the first of equal largest ones, as
/// NumPy and PyTorch. A composite (max, equal, iota, min): no gradient flows through it.
Value argmax(Value x, int64_t axis = -1, bool keepdims = false);
/// The share (f32 scalar) of rows whose argmax over the last axis of `logits` equals `labels`
/// (integers, `logits`' shape without its last dim): a metric, no gradient.
Value accuracy(Value logits, Value labels);

/// Matrix product over the last two dims; batch dims broadcast, a 2-D right operand is shared.
Value matmul(Value a, Value b);
Value reshape(Value x, Shape shape);
Value permute(Value x, std::vector<int64_t> perm);
Value transpose(Value x, int64_t axis_a = -2, int64_t axis_b = -1);
Value broadcast_to(Value x, Shape shape);
Value slice(Value x, std::vector<int64_t> starts, std::vector<int64_t> limits);
Value pad(Value x, std::vector<int64_t> low, std::vector<int64_t> high);
Value concat(std::span<const Value> parts, int64_t axis);
/// Rows of `table` picked by integer `indices`: [I...] x [V, D...] -> [I..., D...].
Value gather(Value table, Value indices);
/// Inverse of gather: sums `updates` [I..., D...] into `rows` zero rows at `indices`.
Value scatter_add(Value indices, Value updates, int64_t rows);
/// Collectives over the `ranks` ranks of the step's job (docs/distributed.md). all_reduce: the
/// sum over ranks. reduce_scatter: dim 0 cut into `ranks` blocks, block r summed over ranks
/// for rank r. all_gather: every rank's operand joined along dim 0 in rank order.
/// broadcast_from: rank `root`'s operand on every rank.
Value all_reduce(Value x, int64_t ranks);
Value reduce_scatter(Value x, int64_t ranks);
Value all_gather(Value x, int64_t ranks);
Value broadcast_from(Value x, int64_t ranks, int64_t root);

Value softmax(Value x, int64_t axis = -1);
Value log_softmax(Value x, int64_t axis = -1);
/// Normalises over the last axis, then scales by gamma and shifts by beta (both [D]).
Value layernorm(Value x, Value gamma, Value beta, double eps = 1e-5);
/// Per-sample softmax cross-entropy: logits [N..., C], integer labels [N...] -> [N...].
Value cross_entropy(Value logits, Value labels);
Value cross_entropy_mean(Value logits, Value labels);
/// Zeroes each element with probability p (scaling the rest by 1/(1-p)); deterministic for a
/// given integer scalar `key` (derive it from the seed and the step).
Value dropout(Value x, double p, Value key);

struct AttentionOptions {
  bool causal = false; ///< query i attends to keys j <= i only (top-left aligned)
  double scale = 0.0;  ///< multiplies q · kᵀ; 0 means 1/√D
  Value mask;          ///< optional bool, broadcastable to [..., Tq, Tk]: true = attend
};
/// Scaled dot-product attention, softmax(scale · q · kᵀ, masked) · v: q [..., Tq, D],
/// k [..., Tk, D], v [..., Tk, Dv] -> [..., Tq, Dv]. Masked scores are -1e9 (a fully masked
/// row averages v). Under autocast it works in the low precision with an f32 softmax.
Value attention(Value q, Value k, Value v, const AttentionOptions& options = {});

/// Scoped model path for nodes built inside it (`blocks.3.attn`), restored on destruction.
class ScopeGuard {
public:
  ScopeGuard(Graph& g, std::string_view name) : graph_(g) { graph_.push_scope(name); }
  /// The scope of the whole `path`, not one under the current scope.
  struct WholePath {};
  ScopeGuard(Graph& g, std::string_view path, WholePath) : graph_(g) { graph_.push_path(path); }
  ~ScopeGuard() { graph_.pop_scope(); }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

private:
  Graph& graph_;
};

} // namespace sinter
