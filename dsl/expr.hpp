// dsl/expr.hpp — Expr<Op, Args...>: a lazy op node with its static result type, and eval()
// An operator on Tensors builds an Expr instead of a node, so its result type (computed by the
// op's constexpr `infer`, with static_asserts for mismatches) is checked before anything runs.
// The Expr emits its ops through ops/value.hpp only when materialised.
#pragma once
#include "dsl/tensor.hpp"

#include <boost/hana/front.hpp>
#include <boost/hana/unpack.hpp>

namespace sinter {
namespace detail {
/// The graph an operand belongs to (a Tensor's node's, an Expr's operands').
template <DType D, std::size_t... Ds> Graph* graph_of(const Tensor<D, Ds...>& t) {
  return t.value().graph;
}
template <class E> Graph* graph_of(const E& e) { return e.graph(); }
} // namespace detail

/// A lazy application of `Op` to `Args` (Tensors or Exprs, held by value). `Op` provides
/// `template <auto... S> static constexpr auto infer()` (the static result type from the
/// operands' StaticTypes) and `Value apply(Value...) const` (the nodes it emits).
template <class Op, class... Args> class Expr {
public:
  static constexpr auto static_type = Op::template infer<Args::static_type...>();
  using tensor_type = typename detail::tensor_of<static_type>::type;
  static constexpr DType dtype = static_type.dtype;
  static constexpr std::size_t rank = static_type.rank;
  using dims_type = typename tensor_type::dims_type;
  static constexpr dims_type dims{};

  explicit Expr(Op op, Args... args)
      : op_(op), args_(std::move(args)...), graph_(detail::graph_of(hana::front(args_))),
        scope_(graph_->current_scope()) {}

  /// Emits the expression's nodes into the trace its operands belong to, under the model path
  /// (scope) that was current when the expression was written, even if it is materialised after
  /// that scope closed. Each call emits anew; hash-consing merges the duplicates, but
  /// materialise (eval or assign to a Tensor) an expression used many times to keep the C++
  /// expression tree small.
  Value value() const {
    uint32_t outer = graph_->current_scope();
    graph_->set_current_scope(scope_);
    struct RestoreScope {
      Graph* graph;
      uint32_t scope;
      ~RestoreScope() { graph->set_current_scope(scope); }
    } restore{graph_, outer};
    return hana::unpack(args_, [this](const Args&... a) { return op_.apply(a.value()...); });
  }

  /// The graph the operands belong to.
  Graph* graph() const { return graph_; }

private:
  Op op_;
  hana::tuple<Args...> args_;
  Graph* graph_;
  uint32_t scope_;
};

/// Materialises an expression into a Tensor of its static type (a Tensor or Var is returned as is).
template <Operand E> auto eval(const E& e) {
  if constexpr (std::same_as<E, Var> || detail::is_tensor<E>::value)
    return e;
  else
    return typename E::tensor_type(e.value());
}

namespace detail {

/// An Expr when every operand is statically typed; with a Var among them the op is emitted
/// at once and the result is a Var (its type is known only at trace time).
template <class Op, class... Args> auto make_expr(Op op, const Args&... args) {
  if constexpr ((StaticOperand<Args> && ...))
    return Expr<Op, Args...>(op, args...);
  else
    return Var(op.apply(value_of(args)...));
}

} // namespace detail
} // namespace sinter
