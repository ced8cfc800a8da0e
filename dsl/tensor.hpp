// dsl/tensor.hpp — the handles a model holds: Tensor<dtype, dims...> (static) and Var (erased)
// Both wrap a sinter::Value, a node of the graph being traced; copying one copies the handle.
#pragma once
#include "dsl/dims.hpp"
#include "jit/api.hpp"

#include <concepts>
#include <stdexcept>
#include <string>

namespace sinter {

/// Anything with a compile-time type that materialises to a node: Tensor and Expr.
template <class T>
concept StaticOperand = requires(const T& t) {
  T::static_type;
  { t.value() } -> std::same_as<Value>;
};

namespace detail {

/// Why a node of type `got` does not fit `expected` (empty when it fits).
template <std::size_t R>
std::string mismatch_reason(StaticType<R> expected, const TensorType& got) {
  if (got.dtype != expected.dtype)
    return "dtype " + std::string(dtype_name(got.dtype)) + ", expected " +
           std::string(dtype_name(expected.dtype));
  if (got.shape.size() != R)
    return "rank " + std::to_string(got.shape.size()) + ", expected " + std::to_string(R);
  for (std::size_t i = 0; i < R; ++i)
    if (expected.dims[i] != dyn && got.shape[i] != static_cast<int64_t>(expected.dims[i]))
      return "dim " + std::to_string(i) + " is " + std::to_string(got.shape[i]) + ", expected " +
             std::to_string(expected.dims[i]);
  return {};
}

inline std::string scope_suffix(const Value& v) {
  const std::string& path = v.graph->scope_path(v.graph->current_scope());
  return path.empty() ? std::string() : " at " + path;
}

template <std::size_t R> void check_fits(StaticType<R> expected, const Value& v) {
  if (!v) throw std::invalid_argument("sinter: a Tensor needs a node of a trace, got an empty one");
  std::string why = mismatch_reason(expected, v.type());
  if (!why.empty())
    throw ShapeError("sinter: Tensor<" + describe(expected) + "> cannot hold a value of type " +
                     to_string(v.type()) + scope_suffix(v) + ": " + why);
}

} // namespace detail

/// A type-erased handle: any Tensor or expression converts to it, so loops over layers whose
/// static shapes differ can carry one variable. Ops on a Var build nodes at once.
class Var {
public:
  Var() = default;
  explicit Var(Value v) : value_(v) {}
  template <StaticOperand T> Var(const T& t) : value_(t.value()) {}

  /// Whether it holds a node (a default Var holds none).
  explicit operator bool() const { return static_cast<bool>(value_); }
  /// The node; throws if this Var was never assigned.
  Value value() const {
    require_assigned();
    return value_;
  }
  Shape shape() const {
    require_assigned();
    return value_.shape();
  }
  DType dtype() const { return value().dtype(); }
  int64_t rank() const { return value().rank(); }

private:
  void require_assigned() const {
    if (!value_)
      throw std::logic_error("sinter: use of an empty Var (assign a tensor to it first)");
  }

  Value value_;
};

/// What the op vocabulary accepts: statically typed operands, or a Var (then ops build at once).
template <class T>
concept Operand = StaticOperand<T> || std::same_as<T, Var>;

/// A tensor of the current trace whose dtype and dims are part of its C++ type;
/// `dyn` dims take their size from the arguments the traced function is called with.
template <DType D, std::size_t... Ds> class Tensor {
public:
  static constexpr StaticType<sizeof...(Ds)> static_type{D, {Ds...}};
  static constexpr DType dtype = D;
  static constexpr std::size_t rank = sizeof...(Ds);
  using dims_type = Dims<Ds...>;
  /// The static dims as Hana integral constants (`dyn` where unknown).
  static constexpr dims_type dims{};

  /// Wraps a node; throws ShapeError if its type does not fit this Tensor's static type.
  explicit Tensor(Value v) : value_(v) { detail::check_fits(static_type, value_); }
  /// Narrows a type-erased handle, checked against the static type.
  Tensor(const Var& v) : Tensor(v.value()) {}
  /// Materialises an expression (or re-types a Tensor) whose static type is compatible.
  template <StaticOperand E>
    requires(!std::same_as<E, Tensor>)
  Tensor(const E& e) : Tensor(e.value()) {
    static_assert(detail::same_type_modulo_dyn(E::static_type, static_type),
                  "sinter: the expression's static dtype or dims differ from the Tensor it is "
                  "assigned to");
  }

  Value value() const { return value_; }
  /// The dims this trace resolved (dyn dims included).
  Shape shape() const { return value_.shape(); }

private:
  Value value_;
};

namespace detail {
template <class T> struct is_tensor : std::false_type {};
template <DType D, std::size_t... Ds> struct is_tensor<Tensor<D, Ds...>> : std::true_type {};

/// The Tensor type of a StaticType value.
template <auto S, class = std::make_index_sequence<S.rank>> struct tensor_of;
template <auto S, std::size_t... I> struct tensor_of<S, std::index_sequence<I...>> {
  using type = Tensor<S.dtype, S.dims[I]...>;
};

inline Value value_of(const Var& v) { return v.value(); }
template <StaticOperand T> Value value_of(const T& t) { return t.value(); }
} // namespace detail

} // namespace sinter
