// dsl/dims.hpp — compile-time tensor types: dtype tags, static dims, `dyn`, broadcasting rules
// Shape rules run in constexpr functions over StaticType (a dtype and a std::array of dims), so
// a mismatch becomes a static_assert at the call site; Tensor exposes the same dims as Hana
// integral constants for users who want to compute with them.
#pragma once
#include "jit/api.hpp" // DType; dsl/ reaches jit/ only through the façade

#include <boost/hana/integral_constant.hpp>
#include <boost/hana/tuple.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace sinter {

namespace hana = boost::hana;

/// A dim known only when the traced function is called (batch, sequence length).
inline constexpr std::size_t dyn = std::size_t(-1);

/// dtype tags for Tensor<dtype, dims...>.
inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
inline constexpr DType bf16 = DType::bf16;
inline constexpr DType f16 = DType::f16;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType boolean = DType::boolean;

/// Static dims as Hana integral constants: Dims<dyn, 784> is hana::tuple<size_t<dyn>, size_t<784>>.
template <std::size_t... Ds> using Dims = hana::tuple<hana::size_t<Ds>...>;

/// The compile-time type of a tensor expression; usable as a template argument.
template <std::size_t Rank> struct StaticType {
  static constexpr std::size_t rank = Rank;
  DType dtype = DType::f32;
  std::array<std::size_t, Rank> dims{};
};

/// Compile-time axis lists: sum(x, axes<1>), transpose<0, 2>(x) normalise with these.
template <int64_t... A> struct Axes {};
template <int64_t... A> inline constexpr Axes<A...> axes{};
/// Tag asking a reduction to keep the reduced axes as size-1 dims.
struct KeepDims {};
inline constexpr KeepDims keepdims{};

namespace detail {

constexpr bool dims_compatible(std::size_t a, std::size_t b) {
  return a == b || a == dyn || b == dyn;
}

/// numpy broadcasting of one dim pair; dyn must turn out to be 1 or the other dim at trace time.
constexpr bool dims_broadcast(std::size_t a, std::size_t b) {
  return a == b || a == 1 || b == 1 || a == dyn || b == dyn;
}
constexpr std::size_t broadcast_dim(std::size_t a, std::size_t b) {
  if (a == b || b == 1) return a;
  if (a == 1) return b;
  return a == dyn ? b : a; // dyn vs N: the result is N whichever way dyn resolves
}

template <std::size_t RA, std::size_t RB>
constexpr bool broadcastable(StaticType<RA> a, StaticType<RB> b) {
  for (std::size_t i = 0; i < RA && i < RB; ++i)
    if (!dims_broadcast(a.dims[RA - 1 - i], b.dims[RB - 1 - i])) return false;
  return true;
}

/// Broadcast result with a's dtype (callers check broadcastable first).
template <std::size_t RA, std::size_t RB>
constexpr auto broadcast(StaticType<RA> a, StaticType<RB> b) {
  constexpr std::size_t R = RA > RB ? RA : RB;
  StaticType<R> out{a.dtype, {}};
  for (std::size_t i = 0; i < R; ++i) {
    std::size_t da = i < RA ? a.dims[RA - 1 - i] : 1, db = i < RB ? b.dims[RB - 1 - i] : 1;
    out.dims[R - 1 - i] = broadcast_dim(da, db);
  }
  return out;
}

template <std::size_t RA, std::size_t RB>
constexpr bool same_type_modulo_dyn(StaticType<RA> a, StaticType<RB> b) {
  if (RA != RB || a.dtype != b.dtype) return false;
  for (std::size_t i = 0; i < RA && i < RB; ++i)
    if (!dims_compatible(a.dims[i], b.dims[i])) return false;
  return true;
}

constexpr bool axis_in_range(int64_t axis, std::size_t rank) {
  return axis >= -static_cast<int64_t>(rank) && axis < static_cast<int64_t>(rank);
}
constexpr std::size_t normalize(int64_t axis, std::size_t rank) {
  return static_cast<std::size_t>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis);
}

/// `f32[dyn,784]`: how errors spell a static type.
template <std::size_t R> std::string describe(StaticType<R> t) {
  std::string out = std::string(dtype_name(t.dtype)) + "[";
  for (std::size_t i = 0; i < R; ++i)
    out += (i ? "," : "") + (t.dims[i] == dyn ? std::string("dyn") : std::to_string(t.dims[i]));
  return out + "]";
}

} // namespace detail
} // namespace sinter
