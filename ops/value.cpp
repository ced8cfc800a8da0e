// ops/value.cpp — emit() (type checking, broadcasting, error context) and the op vocabulary
#include "ops/value.hpp"

#include "ops/padding.hpp"
#include "ops/registry.hpp"

#include <numeric>

namespace sinter {
namespace {

std::string operand_list(std::span<const Value> operands) {
  std::string out;
  for (std::size_t i = 0; i < operands.size(); ++i)
    out += (i ? ", " : "") + to_string(operands[i].type());
  return out;
}

[[noreturn]] void throw_op_error(OpId op, std::span<const Value> operands, Graph* g,
                                 const std::string& why) {
  std::string where;
  if (g && !g->scope_path(g->current_scope()).empty())
    where = " at " + g->scope_path(g->current_scope());
  throw ShapeError("sinter: shape error in " + std::string(op_name(op)) + where + ": operands " +
                   operand_list(operands) + " — " + why);
}

Graph* graph_of(OpId op, std::span<const Value> operands) {
  Graph* g = nullptr;
  for (const Value& v : operands) {
    if (!v) throw std::invalid_argument("sinter: " + std::string(op_name(op)) + ": empty operand");
    if (g && v.graph != g)
      throw std::invalid_argument("sinter: " + std::string(op_name(op)) +
                                  ": operands come from different graphs (traces)");
    g = v.graph;
  }
  return g;
}

Value with_shape(Value x, const Shape& shape) {
  return x.shape() == shape ? x : emit(OpId::broadcast, {x}, Attrs{.ints = shape});
}

} // namespace

Value emit(OpId op, std::span<const Value> operands, Attrs attrs) {
  Graph* g = graph_of(op, operands);
  if (!g)
    throw std::invalid_argument("sinter: emit(" + std::string(op_name(op)) +
                                ") without operands needs the graph: use emit(graph, ...)");
  return emit(*g, op, operands, std::move(attrs));
}

Value emit(Graph& graph, OpId op, std::span<const Value> operands, Attrs attrs) {
  const OpDef& def = op_def(op);
  Graph* g = &graph;
  if (Graph* from_operands = graph_of(op, operands); from_operands && from_operands != g)
    throw std::invalid_argument("sinter: " + std::string(op_name(op)) +
                                ": operands belong to another graph");
  if (def.arity >= 0 && operands.size() != static_cast<std::size_t>(def.arity))
    throw_op_error(op, operands, g,
                   "expects " + std::to_string(def.arity) + " operands, got " +
                       std::to_string(operands.size()));
  if (def.arity < 0 && operands.empty()) throw_op_error(op, operands, g, "needs operands");
  std::vector<Value> args(operands.begin(), operands.end());
  if (def.elementwise && args.size() > 1) {
    Shape common = args[0].shape();
    for (std::size_t i = 1; i < args.size(); ++i) {
      auto b = broadcast_shapes(common, args[i].shape());
      if (!b)
        throw_op_error(op, operands, g,
                       "shapes " + to_string(common) + " and " + to_string(args[i].shape()) +
                           " do not broadcast (each dim must match or be 1)");
      common = *b;
    }
    for (Value& a : args)
      a = with_shape(a, common);
  }
  std::vector<TensorType> types;
  std::vector<ValueId> ids;
  for (const Value& a : args) {
    types.push_back(a.type());
    ids.push_back(a.id);
  }
  TensorType type;
  try {
    type = def.infer(types, attrs);
  } catch (const ShapeError& e) {
    throw_op_error(op, operands, g, e.what());
  }
  Node n;
  n.op = op;
  n.type = std::move(type);
  n.inputs = std::move(ids);
  n.attrs = std::move(attrs);
  return Value{g, g->add(std::move(n))};
}

Value emit(OpId op, std::initializer_list<Value> operands, Attrs attrs) {
  return emit(op, std::span<const Value>(operands.begin(), operands.size()), std::move(attrs));
}

Value input(Graph& g, std::string name, TensorType type) {
  return Value{&g, g.add_input(std::move(name), std::move(type))};
}

Value constant(Graph& g, double value, DType dtype, Shape shape) {
  Node n;
  n.op = OpId::constant;
  n.type = TensorType{dtype, shape};
  n.attrs = Attrs{.ints = std::move(shape), .real = value, .dtype = dtype};
  return Value{&g, g.add(std::move(n))};
}

Value scalar_like(Value x, double value) { return constant(*x.graph, value, x.dtype()); }
Value zeros_like(Value x) { return constant(*x.graph, 0.0, x.dtype(), x.shape()); }
Value ones_like(Value x) { return constant(*x.graph, 1.0, x.dtype(), x.shape()); }

Graph*& active_trace_graph() {
  // Defined here, not inline in a header: code JIT-compiled by a notebook's interpreter gets
  // emulated TLS for an inline thread_local, which clang 19's incremental JIT cannot define
  // twice, and which would not be libsinter's variable anyway.
  thread_local Graph* graph = nullptr;
  return graph;
}

Value iota(Graph& g, DType dtype, Shape shape, int64_t axis) {
  Node n;
  n.op = OpId::iota;
  n.attrs = Attrs{.ints = shape, .ints2 = {axis}, .dtype = dtype};
  n.type = op_def(OpId::iota).infer({}, n.attrs);
  return Value{&g, g.add(std::move(n))};
}

Value operator+(Value a, Value b) { return emit(OpId::add, {a, b}); }
Value operator-(Value a, Value b) { return emit(OpId::sub, {a, b}); }
Value operator*(Value a, Value b) { return emit(OpId::mul, {a, b}); }
Value operator/(Value a, Value b) { return emit(OpId::div, {a, b}); }
Value operator-(Value a) { return emit(OpId::neg, {a}); }
Value operator+(Value a, double b) { return a + scalar_like(a, b); }
Value operator-(Value a, double b) { return a - scalar_like(a, b); }
Value operator*(Value a, double b) { return a * scalar_like(a, b); }
Value operator/(Value a, double b) { return a / scalar_like(a, b); }
Value operator+(double a, Value b) { return scalar_like(b, a) + b; }
Value operator-(double a, Value b) { return scalar_like(b, a) - b; }
Value operator*(double a, Value b) { return scalar_like(b, a) * b; }
Value operator/(double a, Value b) { return scalar_like(b, a) / b; }

// Elementwise builders, one per UNARY / BINARY / COMPARISON entry of ops/op_list.def.
#define SINTER_UNARY_PRIMITIVE(name)                                                               \
  Value name(Value x) { return emit(OpId::name, {x}); }
#define SINTER_UNARY_COMPOSITE(name) SINTER_UNARY_PRIMITIVE(name)
#define SINTER_BINARY_PRIMITIVE(name)                                                              \
  Value name(Value a, Value b) { return emit(OpId::name, {a, b}); }
#define SINTER_COMPARISON_PRIMITIVE(name) SINTER_BINARY_PRIMITIVE(name)
#define SINTER_COMPARISON_COMPOSITE(name) SINTER_BINARY_PRIMITIVE(name)
#include "ops/op_list.def"

Value where(Value cond, Value a, Value b) { return emit(OpId::where, {cond, a, b}); }
Value where(Value cond, Value a, double b) { return where(cond, a, scalar_like(a, b)); }
Value where(Value cond, double a, Value b) { return where(cond, scalar_like(b, a), b); }
Value cast(Value x, DType dtype) {
  return x.dtype() == dtype ? x : emit(OpId::cast, {x}, Attrs{.dtype = dtype});
}

Value sum(Value x, std::vector<int64_t> axes, bool keepdims) {
  return emit(OpId::sum, {x}, Attrs{.ints = std::move(axes), .flag = keepdims});
}
Value mean(Value x, std::vector<int64_t> axes, bool keepdims) {
  return emit(OpId::mean, {x}, Attrs{.ints = std::move(axes), .flag = keepdims});
}
Value max(Value x, std::vector<int64_t> axes, bool keepdims) {
  return emit(OpId::max, {x}, Attrs{.ints = std::move(axes), .flag = keepdims});
}
Value min(Value x, std::vector<int64_t> axes, bool keepdims) {
  return emit(OpId::min, {x}, Attrs{.ints = std::move(axes), .flag = keepdims});
}
Value logsumexp(Value x, std::vector<int64_t> axes, bool keepdims) {
  return emit(OpId::logsumexp, {x}, Attrs{.ints = std::move(axes), .flag = keepdims});
}

Value argmax(Value x, int64_t axis, bool keepdims) {
  Value operands[] = {x};
  std::optional<int64_t> a = normalize_axis(axis, static_cast<std::size_t>(x.rank()));
  if (!a)
    throw_op_error(OpId::max, operands, x.graph,
                   "argmax over axis " + std::to_string(axis) + " of a rank-" +
                       std::to_string(x.rank()) + " tensor");
  const int64_t length = x.shape()[static_cast<std::size_t>(*a)];
  // Positions holding the maximum keep their index, the others `length`; the least wins.
  Value index = iota(*x.graph, DType::i32, x.shape(), *a);
  Value at_max = equal(x, max(x, {*a}, true));
  return min(where(at_max, index, static_cast<double>(length)), {*a}, keepdims);
}

Value accuracy(Value logits, Value labels) {
  Value operands[] = {logits, labels};
  Shape rows = logits.shape();
  if (!rows.empty()) rows.pop_back();
  if (logits.rank() < 1 || labels.shape() != rows || is_float(labels.dtype()))
    throw_op_error(OpId::equal, operands, logits.graph,
                   "accuracy takes logits [..., classes] and integer labels of their shape "
                   "without the last dim");
  Value hits = equal(argmax(logits, -1), cast(labels, DType::i32));
  return mean(cast(hits, DType::f32));
}

Value matmul(Value a, Value b) {
  Value operands[] = {a, b};
  if (a.rank() < 2 || b.rank() < 2)
    throw_op_error(OpId::matmul, operands, a.graph,
                   "operands need rank >= 2; reshape a vector to [1,K] or [K,1]");
  int64_t k_a = a.shape().back(), k_b = b.shape()[b.shape().size() - 2];
  if (k_a != k_b)
    throw_op_error(OpId::matmul, operands, a.graph,
                   "inner dims " + std::to_string(k_a) + " vs " + std::to_string(k_b));
  if (k_a < 1)
    throw_op_error(OpId::matmul, operands, a.graph,
                   "the inner dim is " + std::to_string(k_a) + "; it must be at least 1");
  if (b.rank() == 2 && a.rank() > 2) {
    // A shared weight: fold the batch dims into rows, one 2-D product.
    Shape out_shape = a.shape();
    int64_t rows = numel(a.shape()) / k_a;
    out_shape.back() = b.shape().back();
    return reshape(emit(OpId::matmul, {reshape(a, {rows, k_a}), b}), out_shape);
  }
  Shape shape_a = a.shape(), shape_b = b.shape();
  Shape batch_a(shape_a.begin(), shape_a.end() - 2);
  Shape batch_b(shape_b.begin(), shape_b.end() - 2);
  auto batch = broadcast_shapes(batch_a, batch_b);
  if (!batch)
    throw_op_error(OpId::matmul, operands, a.graph,
                   "batch dims " + to_string(batch_a) + " and " + to_string(batch_b) +
                       " do not broadcast");
  // broadcast (numpy, right-aligned) lifts a lower-rank operand to the common batch dims.
  auto widen = [&](Value x) {
    Shape target = *batch;
    target.push_back(x.shape()[x.shape().size() - 2]);
    target.push_back(x.shape().back());
    return with_shape(x, target);
  };
  return emit(OpId::matmul, {widen(a), widen(b)});
}

Value reshape(Value x, Shape shape) {
  return x.shape() == shape ? x : emit(OpId::reshape, {x}, Attrs{.ints = std::move(shape)});
}
Value permute(Value x, std::vector<int64_t> perm) {
  return emit(OpId::permute, {x}, Attrs{.ints = std::move(perm)});
}
Value transpose(Value x, int64_t axis_a, int64_t axis_b) {
  return emit(OpId::transpose, {x}, Attrs{.ints = {axis_a, axis_b}});
}
Value broadcast_to(Value x, Shape shape) {
  return emit(OpId::broadcast_to, {x}, Attrs{.ints = std::move(shape)});
}
Value slice(Value x, std::vector<int64_t> starts, std::vector<int64_t> limits) {
  return emit(OpId::slice, {x}, Attrs{.ints = std::move(starts), .ints2 = std::move(limits)});
}
Value pad(Value x, std::vector<int64_t> low, std::vector<int64_t> high) {
  return emit(OpId::pad, {x}, Attrs{.ints = std::move(low), .ints2 = std::move(high)});
}
Value concat(std::span<const Value> parts, int64_t axis) {
  return emit(OpId::concat, parts, Attrs{.ints = {axis}});
}
Value gather(Value table, Value indices) { return emit(OpId::gather, {table, indices}); }
Value scatter_add(Value indices, Value updates, int64_t rows) {
  return emit(OpId::scatter_add, {indices, updates}, Attrs{.ints = {rows}});
}

Value all_reduce(Value x, int64_t ranks) {
  return emit(OpId::all_reduce, {x}, Attrs{.ints = {ranks}});
}
Value reduce_scatter(Value x, int64_t ranks) {
  return emit(OpId::reduce_scatter, {x}, Attrs{.ints = {ranks}});
}
Value all_gather(Value x, int64_t ranks) {
  return emit(OpId::all_gather, {x}, Attrs{.ints = {ranks}});
}
Value broadcast_from(Value x, int64_t ranks, int64_t root) {
  return emit(OpId::broadcast_from, {x}, Attrs{.ints = {ranks, root}});
}

Value softmax(Value x, int64_t axis) { return emit(OpId::softmax, {x}, Attrs{.ints = {axis}}); }
Value log_softmax(Value x, int64_t axis) {
  return emit(OpId::log_softmax, {x}, Attrs{.ints = {axis}});
}
Value layernorm(Value x, Value gamma, Value beta, double eps) {
  return emit(OpId::layernorm, {x, gamma, beta}, Attrs{.real = eps});
}
Value cross_entropy(Value logits, Value labels) {
  return emit(OpId::cross_entropy, {logits, labels});
}
Value dropout(Value x, double p, Value key) {
  return emit(OpId::dropout, {x, key}, Attrs{.real = p});
}
Value attention(Value q, Value k, Value v, const AttentionOptions& options) {
  Attrs attrs{.real = options.scale, .flag = options.causal};
  Value mask = options.mask;
  // Shape buckets: padded keys are never attended to.
  if (Value real_keys = padded_key_mask(q, k, options.causal))
    mask = mask ? where(real_keys, mask, real_keys) : real_keys;
  if (mask) return emit(OpId::attention, {q, k, v, mask}, attrs);
  return emit(OpId::attention, {q, k, v}, attrs);
}
Value cross_entropy_mean(Value logits, Value labels) {
  // Shape buckets: the mean over the real positions only.
  if (padding_mask(labels)) return padded_mean(cross_entropy(logits, labels));
  return emit(OpId::cross_entropy_mean, {logits, labels});
}

} // namespace sinter
