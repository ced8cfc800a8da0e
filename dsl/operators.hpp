// dsl/operators.hpp — the op vocabulary on Tensors, Exprs and Vars, with static shape rules
// Each op is a small tag: `infer` states its static result type (static_assert on a mismatch,
// with `dyn` compatible with any dim); `apply` emits it with the ops/value.hpp function.
#pragma once
#include "dsl/expr.hpp"

#include <initializer_list>
#include <utility>
#include <vector>

namespace sinter {
namespace detail {

// ---- function objects: the ops/value.hpp function each tag emits -------------------------

#define SINTER_DSL_FN1(name, call)                                                                 \
  struct name##_fn {                                                                               \
    Value operator()(Value x) const { return call(x); }                                            \
  };
#define SINTER_DSL_FN2(name, call)                                                                 \
  struct name##_fn {                                                                               \
    Value operator()(Value a, Value b) const { return call(a, b); }                                \
  };
SINTER_DSL_FN1(neg, -)
SINTER_DSL_FN2(add, operator+)
SINTER_DSL_FN2(sub, operator-)
SINTER_DSL_FN2(mul, operator*)
SINTER_DSL_FN2(div, operator/)
// One function object per elementwise entry of ops/op_list.def.
#define SINTER_UNARY_PRIMITIVE(name) SINTER_DSL_FN1(name, sinter::name)
#define SINTER_UNARY_COMPOSITE(name) SINTER_DSL_FN1(name, sinter::name)
#define SINTER_BINARY_PRIMITIVE(name) SINTER_DSL_FN2(name, sinter::name)
#define SINTER_COMPARISON_PRIMITIVE(name) SINTER_DSL_FN2(name, sinter::name)
#define SINTER_COMPARISON_COMPOSITE(name) SINTER_DSL_FN2(name, sinter::name)
#include "ops/op_list.def"
#undef SINTER_DSL_FN1
#undef SINTER_DSL_FN2

// ---- elementwise tags ---------------------------------------------------------------------

/// Unary elementwise: the result has the operand's type.
template <class Fn> struct Map {
  template <auto X> static constexpr auto infer() { return X; }
  Value apply(Value x) const { return Fn{}(x); }
};

/// Binary elementwise with numpy broadcasting; comparisons give booleans.
template <class Fn, bool Compare> struct Zip {
  template <auto A, auto B> static constexpr auto infer() {
    static_assert(broadcastable(A, B),
                  "sinter: elementwise operands have mismatched static dims (each pair of dims, "
                  "aligned from the right, must be equal, 1 or dyn)");
    static_assert(A.dtype == B.dtype,
                  "sinter: elementwise operands have different dtypes; cast one of them");
    auto out = broadcast(A, B);
    if (Compare) out.dtype = DType::boolean;
    return out;
  }
  Value apply(Value a, Value b) const { return Fn{}(a, b); }
};

/// Binary elementwise with a double scalar (a rank-0 constant of the tensor's dtype).
template <class Fn, bool ScalarOnLeft, bool Compare> struct WithScalar {
  double scalar = 0.0;
  template <auto X> static constexpr auto infer() {
    auto out = X;
    if (Compare) out.dtype = DType::boolean;
    return out;
  }
  Value apply(Value x) const {
    Value s = scalar_like(x, scalar);
    return ScalarOnLeft ? Fn{}(s, x) : Fn{}(x, s);
  }
};

struct Where {
  template <auto C, auto A, auto B> static constexpr auto infer() {
    static_assert(C.dtype == DType::boolean,
                  "sinter: where needs a boolean condition (build it with a comparison)");
    static_assert(A.dtype == B.dtype, "sinter: where branches have different dtypes");
    static_assert(broadcastable(C, A) && broadcastable(broadcast(C, A), B),
                  "sinter: where operands have mismatched static dims");
    auto out = broadcast(broadcast(C, A), B);
    out.dtype = A.dtype;
    return out;
  }
  Value apply(Value c, Value a, Value b) const { return sinter::where(c, a, b); }
};

/// where with one branch a double scalar (a rank-0 constant of the tensor branch's dtype).
template <bool ScalarIsTrueBranch> struct WhereScalar {
  double scalar = 0.0;
  template <auto C, auto X> static constexpr auto infer() {
    static_assert(C.dtype == DType::boolean,
                  "sinter: where needs a boolean condition (build it with a comparison)");
    static_assert(broadcastable(C, X), "sinter: where operands have mismatched static dims");
    auto out = broadcast(C, X);
    out.dtype = X.dtype;
    return out;
  }
  Value apply(Value c, Value x) const {
    return ScalarIsTrueBranch ? sinter::where(c, scalar, x) : sinter::where(c, x, scalar);
  }
};

template <class> inline constexpr bool always_false = false;

template <DType To> struct Cast {
  template <auto X> static constexpr auto infer() {
    auto out = X;
    out.dtype = To;
    return out;
  }
  Value apply(Value x) const { return sinter::cast(x, To); }
};

// ---- linear algebra and layout ------------------------------------------------------------

template <std::size_t RA, std::size_t RB>
constexpr bool matmul_batch_broadcasts(StaticType<RA> a, StaticType<RB> b) {
  if (RB == 2) return true; // a 2-D right operand is shared across a's batch dims
  for (std::size_t i = 0; i + 2 < RA && i + 2 < RB; ++i)
    if (!dims_broadcast(a.dims[RA - 3 - i], b.dims[RB - 3 - i])) return false;
  return true;
}

template <std::size_t RA, std::size_t RB>
constexpr auto matmul_type(StaticType<RA> a, StaticType<RB> b) {
  constexpr std::size_t R = RB == 2 ? RA : (RA > RB ? RA : RB);
  StaticType<R> out{a.dtype, {}};
  for (std::size_t i = 0; i + 2 < R; ++i) {
    std::size_t da = i + 2 < RA ? a.dims[RA - 3 - i] : 1;
    std::size_t db = i + 2 < RB ? b.dims[RB - 3 - i] : 1;
    out.dims[R - 3 - i] = RB == 2 ? da : broadcast_dim(da, db);
  }
  out.dims[R - 2] = a.dims[RA - 2];
  out.dims[R - 1] = b.dims[RB - 1];
  return out;
}

struct MatMul {
  template <auto A, auto B> static constexpr auto infer() {
    static_assert(A.rank >= 2 && B.rank >= 2,
                  "sinter: matmul operands need rank >= 2; reshape a vector to [1,K] or [K,1]");
    static_assert(A.dtype == B.dtype, "sinter: matmul operand dtypes differ; cast one of them");
    if constexpr (A.rank < 2 || B.rank < 2) {
      return A;
    } else {
      static_assert(dims_compatible(A.dims[A.rank - 1], B.dims[B.rank - 2]),
                    "sinter: matmul inner dimensions differ (the left operand's last dim must "
                    "equal the right operand's second-to-last dim)");
      static_assert(matmul_batch_broadcasts(A, B),
                    "sinter: matmul batch dimensions do not broadcast");
      return matmul_type(A, B);
    }
  }
  Value apply(Value a, Value b) const { return sinter::matmul(a, b); }
};

constexpr std::size_t count_dyn(std::initializer_list<std::size_t> dims) {
  std::size_t n = 0;
  for (std::size_t d : dims)
    n += d == dyn;
  return n;
}

/// Static part of the element count (dyn dims left out).
template <std::size_t R> constexpr std::size_t static_numel(const std::array<std::size_t, R>& d) {
  std::size_t n = 1;
  for (std::size_t x : d)
    n *= x == dyn ? 1 : x;
  return n;
}

template <std::size_t... Ds, std::size_t R>
constexpr bool reshape_preserves_numel(StaticType<R> x) {
  constexpr std::array<std::size_t, sizeof...(Ds)> target{Ds...};
  bool source_dyn = false;
  for (std::size_t d : x.dims)
    source_dyn = source_dyn || d == dyn;
  bool target_dyn = count_dyn({Ds...}) > 0;
  std::size_t s = static_numel(x.dims), t = static_numel(target);
  if (!source_dyn && !target_dyn) return s == t;
  if (!source_dyn) return t != 0 && s % t == 0;
  if (!target_dyn) return s != 0 && t % s == 0;
  return true;
}

/// Reshape to static dims; one `dyn` takes whatever size keeps the element count.
template <std::size_t... Ds> struct Reshape {
  template <auto X> static constexpr auto infer() {
    static_assert(count_dyn({Ds...}) <= 1, "sinter: reshape target may have at most one dyn dim");
    static_assert(reshape_preserves_numel<Ds...>(X),
                  "sinter: reshape changes the number of elements");
    return StaticType<sizeof...(Ds)>{X.dtype, {Ds...}};
  }
  Value apply(Value x) const {
    Shape target{static_cast<int64_t>(Ds)...};
    int64_t known = 1;
    for (int64_t d : target)
      known *= d == static_cast<int64_t>(dyn) ? 1 : d;
    int64_t total = numel(x.shape());
    for (int64_t& d : target) {
      if (d != static_cast<int64_t>(dyn)) continue;
      if (known == 0 || total % known != 0)
        throw ShapeError("sinter: shape error in reshape" + scope_suffix(x) + ": cannot reshape " +
                         to_string(x.type()) + " to " +
                         describe(StaticType<sizeof...(Ds)>{x.dtype(), {Ds...}}));
      d = total / known;
    }
    return sinter::reshape(x, target);
  }
};

template <int64_t A, int64_t B> struct Transpose {
  template <auto X> static constexpr auto infer() {
    static_assert(axis_in_range(A, X.rank) && axis_in_range(B, X.rank),
                  "sinter: transpose axis out of range for the operand's rank");
    auto out = X;
    if constexpr (axis_in_range(A, X.rank) && axis_in_range(B, X.rank))
      std::swap(out.dims[normalize(A, X.rank)], out.dims[normalize(B, X.rank)]);
    return out;
  }
  Value apply(Value x) const { return sinter::transpose(x, A, B); }
};

template <std::size_t R, int64_t... P> constexpr bool is_permutation() {
  if (sizeof...(P) != R) return false;
  std::array<bool, R> seen{};
  for (int64_t p : std::initializer_list<int64_t>{P...}) {
    if (p < 0 || p >= static_cast<int64_t>(R) || seen[static_cast<std::size_t>(p)]) return false;
    seen[static_cast<std::size_t>(p)] = true;
  }
  return true;
}

template <int64_t... P> struct Permute {
  template <auto X> static constexpr auto infer() {
    static_assert(is_permutation<X.rank, P...>(),
                  "sinter: permute needs a permutation of all of the operand's axes");
    StaticType<X.rank> out{X.dtype, {}};
    if constexpr (is_permutation<X.rank, P...>()) {
      std::size_t i = 0;
      for (int64_t p : std::initializer_list<int64_t>{P...})
        out.dims[i++] = X.dims[static_cast<std::size_t>(p)];
    }
    return out;
  }
  Value apply(Value x) const { return sinter::permute(x, {P...}); }
};

// ---- reductions ---------------------------------------------------------------------------

struct sum_fn {
  Value operator()(Value x, std::vector<int64_t> a, bool k) const { return sinter::sum(x, a, k); }
};
struct mean_fn {
  Value operator()(Value x, std::vector<int64_t> a, bool k) const { return sinter::mean(x, a, k); }
};
struct max_fn {
  Value operator()(Value x, std::vector<int64_t> a, bool k) const { return sinter::max(x, a, k); }
};
struct min_fn {
  Value operator()(Value x, std::vector<int64_t> a, bool k) const { return sinter::min(x, a, k); }
};
struct logsumexp_fn {
  Value operator()(Value x, std::vector<int64_t> a, bool k) const {
    return sinter::logsumexp(x, a, k);
  }
};

/// Which axes a reduction removes (no axes: all of them).
template <int64_t... Ax, std::size_t R> constexpr std::array<bool, R> reduced_axes(StaticType<R>) {
  std::array<bool, R> reduced{};
  if (sizeof...(Ax) == 0) reduced.fill(true);
  for (int64_t a : std::initializer_list<int64_t>{Ax...})
    if (axis_in_range(a, R)) reduced[normalize(a, R)] = true;
  return reduced;
}

template <std::size_t R> constexpr std::size_t count_kept(const std::array<bool, R>& reduced) {
  std::size_t n = 0;
  for (bool r : reduced)
    n += !r;
  return n;
}

template <class Fn, bool KeepDims, int64_t... Ax> struct Reduce {
  template <auto X> static constexpr auto infer() {
    static_assert((axis_in_range(Ax, X.rank) && ...),
                  "sinter: reduction axis out of range for the operand's rank");
    constexpr auto reduced = reduced_axes<Ax...>(X);
    constexpr std::size_t kept = count_kept(reduced);
    StaticType<KeepDims ? X.rank : kept> out{X.dtype, {}};
    for (std::size_t i = 0, j = 0; i < X.rank; ++i) {
      if (!reduced[i])
        out.dims[j++] = X.dims[i];
      else if (KeepDims)
        out.dims[j++] = 1;
    }
    return out;
  }
  Value apply(Value x) const { return Fn{}(x, std::vector<int64_t>{Ax...}, KeepDims); }
};

// ---- neural-network ops -------------------------------------------------------------------

template <Value (*F)(Value, int64_t)> struct AlongAxis {
  int64_t axis = -1;
  template <auto X> static constexpr auto infer() {
    static_assert(X.rank >= 1, "sinter: softmax needs rank >= 1");
    return X;
  }
  Value apply(Value x) const { return F(x, axis); }
};

struct LayerNorm {
  double eps = 1e-5;
  template <auto X, auto G, auto B> static constexpr auto infer() {
    static_assert(X.rank >= 1 && G.rank == 1 && B.rank == 1,
                  "sinter: layernorm needs x of rank >= 1 and gamma, beta of rank 1");
    static_assert(G.dtype == X.dtype && B.dtype == X.dtype,
                  "sinter: layernorm gamma and beta need the input's dtype");
    if constexpr (X.rank >= 1 && G.rank == 1 && B.rank == 1)
      static_assert(dims_compatible(G.dims[0], X.dims[X.rank - 1]) &&
                        dims_compatible(B.dims[0], X.dims[X.rank - 1]),
                    "sinter: layernorm gamma and beta must have the input's last dim");
    return X;
  }
  Value apply(Value x, Value g, Value b) const { return sinter::layernorm(x, g, b, eps); }
};

template <bool Mean> struct CrossEntropy {
  template <auto L, auto Y> static constexpr auto infer() {
    static_assert(is_float(L.dtype), "sinter: cross_entropy logits must be floating point");
    static_assert(is_integer(Y.dtype),
                  "sinter: cross_entropy labels must be an integer tensor (i32 or i64)");
    static_assert(L.rank == Y.rank + 1,
                  "sinter: cross_entropy labels must have the logits' shape without the class dim");
    if constexpr (L.rank == Y.rank + 1) {
      constexpr bool leading_dims_match = [] {
        for (std::size_t i = 0; i < Y.rank; ++i)
          if (!dims_compatible(L.dims[i], Y.dims[i])) return false;
        return true;
      }();
      static_assert(leading_dims_match,
                    "sinter: cross_entropy labels must have the logits' shape without the "
                    "class dim");
    }
    if constexpr (Mean)
      return StaticType<0>{L.dtype, {}};
    else
      return StaticType<Y.rank>{L.dtype, Y.dims};
  }
  Value apply(Value logits, Value labels) const {
    return Mean ? sinter::cross_entropy_mean(logits, labels)
                : sinter::cross_entropy(logits, labels);
  }
};

/// Rows of a table at integer indices: [I...] x [V, D...] -> [I..., D...].
struct Gather {
  template <auto T, auto I> static constexpr auto infer() {
    static_assert(T.rank >= 1, "sinter: gather needs a table of rank >= 1");
    static_assert(is_integer(I.dtype), "sinter: gather indices must be integer (i32 or i64)");
    if constexpr (T.rank >= 1) {
      StaticType<I.rank + T.rank - 1> out{T.dtype, {}};
      for (std::size_t i = 0; i < I.rank; ++i)
        out.dims[i] = I.dims[i];
      for (std::size_t i = 1; i < T.rank; ++i)
        out.dims[I.rank + i - 1] = T.dims[i];
      return out;
    } else {
      return T;
    }
  }
  Value apply(Value table, Value indices) const { return sinter::gather(table, indices); }
};

} // namespace detail

// ---- the user-facing vocabulary -----------------------------------------------------------
// Every function takes Tensors, Exprs or Vars. With only static operands it returns a lazy
// Expr whose static type is checked at compile time; with a Var among them it returns a Var.

#define SINTER_DSL_UNARY(name, fn)                                                                 \
  template <Operand X> auto name(const X& x) {                                                     \
    return detail::make_expr(detail::Map<detail::fn##_fn>{}, x);                                   \
  }
#define SINTER_DSL_BINARY(name, fn, compare)                                                       \
  template <Operand A, Operand B> auto name(const A& a, const B& b) {                              \
    return detail::make_expr(detail::Zip<detail::fn##_fn, compare>{}, a, b);                       \
  }                                                                                                \
  template <Operand A> auto name(const A& a, double s) {                                           \
    return detail::make_expr(detail::WithScalar<detail::fn##_fn, false, compare>{s}, a);           \
  }                                                                                                \
  template <Operand B> auto name(double s, const B& b) {                                           \
    return detail::make_expr(detail::WithScalar<detail::fn##_fn, true, compare>{s}, b);            \
  }

SINTER_DSL_UNARY(operator-, neg)
// One DSL function per elementwise entry of ops/op_list.def.
#define SINTER_UNARY_PRIMITIVE(name) SINTER_DSL_UNARY(name, name)
#define SINTER_UNARY_COMPOSITE(name) SINTER_DSL_UNARY(name, name)
#define SINTER_BINARY_PRIMITIVE(name) SINTER_DSL_BINARY(name, name, false)
#define SINTER_COMPARISON_PRIMITIVE(name) SINTER_DSL_BINARY(name, name, true)
#define SINTER_COMPARISON_COMPOSITE(name) SINTER_DSL_BINARY(name, name, true)
#include "ops/op_list.def"
/// gelu is the tanh approximation (GPT-2); gelu_erf is the exact form (PyTorch's default).
SINTER_DSL_UNARY(gelu, gelu_tanh)

SINTER_DSL_BINARY(operator+, add, false)
SINTER_DSL_BINARY(operator-, sub, false)
SINTER_DSL_BINARY(operator*, mul, false)
SINTER_DSL_BINARY(operator/, div, false)
SINTER_DSL_BINARY(operator<, less, true)
SINTER_DSL_BINARY(operator<=, less_equal, true)
SINTER_DSL_BINARY(operator>, greater, true)
SINTER_DSL_BINARY(operator>=, greater_equal, true)
#undef SINTER_DSL_UNARY
#undef SINTER_DSL_BINARY

/// Picks `a` where `cond` (boolean) holds, else `b`; all three broadcast.
template <Operand C, Operand A, Operand B> auto where(const C& cond, const A& a, const B& b) {
  return detail::make_expr(detail::Where{}, cond, a, b);
}
/// where with a scalar branch: where(cond, x, 1.0), where(cond, 0.0, x). The scalar takes the
/// tensor branch's dtype; the result has the tensor branch's dtype and the broadcast shape.
template <Operand C, Operand A> auto where(const C& cond, const A& a, double b) {
  return detail::make_expr(detail::WhereScalar<false>{b}, cond, a);
}
template <Operand C, Operand B> auto where(const C& cond, double a, const B& b) {
  return detail::make_expr(detail::WhereScalar<true>{a}, cond, b);
}
/// Two scalar branches give the result no dtype: rejected at compile time.
template <Operand C> auto where(const C& cond, double, double) {
  static_assert(detail::always_false<C>,
                "sinter: where needs at least one tensor branch (the result takes its dtype); "
                "make one branch a tensor, e.g. where(cond, full<f32>(a), b)");
  return cond;
}

/// Converts the elements: cast<f64>(x).
template <DType To, Operand X> auto cast(const X& x) {
  return detail::make_expr(detail::Cast<To>{}, x);
}

/// Matrix product over the last two dims; batch dims broadcast, a 2-D right operand is shared.
template <Operand A, Operand B> auto matmul(const A& a, const B& b) {
  return detail::make_expr(detail::MatMul{}, a, b);
}

/// Reshape to static dims, at most one of them `dyn`: reshape<dyn, 784>(images).
template <std::size_t... Ds, Operand X> auto reshape(const X& x) {
  return detail::make_expr(detail::Reshape<Ds...>{}, x);
}
/// Reshape to dims known only at trace time.
template <Operand X> Var reshape(const X& x, Shape shape) {
  return Var(sinter::reshape(detail::value_of(x), std::move(shape)));
}

/// Swaps two axes (default: the last two): transpose(x), transpose<0, 2>(x).
template <int64_t A = -2, int64_t B = -1, Operand X> auto transpose(const X& x) {
  return detail::make_expr(detail::Transpose<A, B>{}, x);
}
/// Reorders all axes: permute<0, 2, 1, 3>(x).
template <int64_t... P, Operand X> auto permute(const X& x) {
  return detail::make_expr(detail::Permute<P...>{}, x);
}

// Reductions: sum(x) over all axes; sum(x, axes<1>) and sum(x, axes<-1>, keepdims) with static
// result dims; sum(x, {1}, true) with axes chosen at run time returns a Var.
#define SINTER_DSL_REDUCTION(name)                                                                 \
  template <Operand X, int64_t... Ax> auto name(const X& x, Axes<Ax...> = {}) {                    \
    return detail::make_expr(detail::Reduce<detail::name##_fn, false, Ax...>{}, x);                \
  }                                                                                                \
  template <Operand X, int64_t... Ax> auto name(const X& x, Axes<Ax...>, KeepDims) {               \
    return detail::make_expr(detail::Reduce<detail::name##_fn, true, Ax...>{}, x);                 \
  }                                                                                                \
  template <Operand X> Var name(const X& x, std::vector<int64_t> axes, bool keep = false) {        \
    return Var(detail::name##_fn{}(detail::value_of(x), std::move(axes), keep));                   \
  }
SINTER_DSL_REDUCTION(sum)
SINTER_DSL_REDUCTION(mean)
SINTER_DSL_REDUCTION(max)
SINTER_DSL_REDUCTION(min)
SINTER_DSL_REDUCTION(logsumexp)
#undef SINTER_DSL_REDUCTION

template <Operand X> auto softmax(const X& x, int64_t axis = -1) {
  return detail::make_expr(detail::AlongAxis<&sinter::softmax>{axis}, x);
}
template <Operand X> auto log_softmax(const X& x, int64_t axis = -1) {
  return detail::make_expr(detail::AlongAxis<&sinter::log_softmax>{axis}, x);
}

/// Normalises over the last axis, then scales by gamma and shifts by beta (both [D]).
template <Operand X, Operand G, Operand B>
auto layernorm(const X& x, const G& gamma, const B& beta, double eps = 1e-5) {
  return detail::make_expr(detail::LayerNorm{eps}, x, gamma, beta);
}

/// Per-sample softmax cross-entropy: logits [N..., C], integer labels [N...] -> [N...].
template <Operand L, Operand Y> auto cross_entropy(const L& logits, const Y& labels) {
  return detail::make_expr(detail::CrossEntropy<false>{}, logits, labels);
}
/// The mean of cross_entropy over all samples: a scalar loss.
template <Operand L, Operand Y> auto cross_entropy_mean(const L& logits, const Y& labels) {
  return detail::make_expr(detail::CrossEntropy<true>{}, logits, labels);
}

/// Rows of `table` at integer `indices`: [I...] x [V, D...] -> [I..., D...].
template <Operand T, Operand I> auto gather(const T& table, const I& indices) {
  return detail::make_expr(detail::Gather{}, table, indices);
}
/// Embedding lookup: gather under the name a model author looks for.
template <Operand T, Operand I> auto embedding(const T& table, const I& ids) {
  return gather(table, ids);
}

} // namespace sinter
