// ops/registry.hpp — OpDef: everything about one op (type rule, gradient, lowering, test cases)
#pragma once
#include "ops/kernel_kind.hpp"
#include "ops/value.hpp"

#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace sinter {

/// Dense row-major float64 tensor: the value type of the reference interpreter and references.
struct F64Tensor {
  Shape shape;
  std::vector<double> data;
};

/// What a gradient rule sees: the node's operands and result, and the result's cotangent.
struct GradArgs {
  std::span<const Value> operands;
  Value result;
  Value cotangent;
  const Attrs& attrs;
};

/// One random operand of a generated test. Integer and bool operands draw whole numbers in
/// [lo, hi); floats draw uniformly in [lo, hi), with |x| >= min_magnitude (keeps kinks away).
struct TestOperand {
  DType dtype = DType::f64;
  Shape shape;
  double lo = -2.0, hi = 2.0;
  double min_magnitude = 0.0;
  bool whole_numbers = false; ///< floats rounded to integers (makes ties and equality likely)
};

/// One value of an elementwise op worked out by hand: its operands and the exact result
/// (written as literals, never computed by the op's `reference`).
struct KnownValue {
  std::vector<double> operands;
  double result;
};

struct OpTestCase {
  std::vector<TestOperand> operands;
  Attrs attrs;
};

/// What an op computes in under autocast (jit/passes autocast; docs/amp.md):
enum class Precision {
  follow_input, ///< low when a float operand is low (work after a GEMM stays low), else f32
  low,          ///< the step's low precision (bf16/fp16): GEMMs and attention, tensor-core work
  fp32,         ///< operands raised to f32: softmax, norms, losses, sums (accuracy-critical)
};

/// What the fusion pass may do with a primitive that loop kernels inline (composites never
/// reach it; a primitive whose kernel_kind is not `loop` is always a kernel of its own).
enum class FusionCost {
  expensive,  ///< several instructions or a libm call: computed once, stored if shared
  cheap,      ///< about one instruction per element: recomputed in each consumer
  index_only, ///< moves or picks elements, no arithmetic: always recomputed
};

/// How a reduction folds the elements of its operand into each output. Every schedule starts
/// its accumulators at `identity` and merges values and partial results (a thread's run, a warp
/// lane's, a block's) with `combine`, in any order and grouping, so the two must agree:
/// combine(identity, x) == x for every x.
struct Reducer {
  enum class Combine {
    add, ///< acc + x (floats: reassociated, so vector loops keep several partial sums)
    max, ///< acc < x ? x : acc (a NaN in x is skipped, as std::max(acc, x) does)
    min, ///< x < acc ? x : acc (a NaN in x is skipped, as std::min(acc, x) does)
  };
  Combine combine;
  /// The accumulators' start. Integers have no infinity: -inf and +inf stand for the integer
  /// dtype's lowest and highest value.
  double identity;
};

struct OpDef {
  int arity = 1;              ///< number of tensor operands; -1 = any number >= 1
  bool elementwise = false;   ///< operands broadcast (numpy rules) to one shape first
  bool differentiable = true; ///< false: no gradient flows through this op
  Precision precision = Precision::follow_input;
  /// Whether simplify may fold it when every operand is a splat constant (evaluating
  /// `reference` on the scalars): elementwise primitives and pure layout changes.
  bool foldable = false;
  FusionCost fusion = FusionCost::expensive;
  /// Primitives: the kernel a node of this op makes when it is a kernel's root. Anything but
  /// `loop` is always a kernel of its own, its node never inlined into another kernel; a
  /// `loop` primitive has an elemental case in jit/codegen's emitter (the [op-facts] test).
  KernelKind kernel_kind = KernelKind::loop;
  /// `reduce` primitives: how the reduction folds (the emitter's reduce_init and combine).
  std::optional<Reducer> reducer;
  /// Result type from operand types; throws ShapeError with a message saying what is wrong.
  TensorType (*infer)(std::span<const TensorType> operands, const Attrs& attrs) = nullptr;
  /// Cotangent per operand (a null Value for none). Null rule on a composite: autodiff
  /// differentiates its lowering instead.
  std::vector<Value> (*grad)(const GradArgs& args) = nullptr;
  /// Composites only: the same computation in terms of other ops.
  Value (*lower)(std::span<const Value> operands, const Attrs& attrs) = nullptr;
  /// Independent, naive float64 implementation that the generated tests compare against.
  F64Tensor (*reference)(std::span<const F64Tensor> operands, const Attrs& attrs,
                         const TensorType& result) = nullptr;
  /// Shapes, domains and attributes the generated forward and gradient tests run on.
  std::vector<OpTestCase> (*test_cases)() = nullptr;
  /// Elementwise primitives: hand-worked values the tests check the interpreter (that is,
  /// `reference`) against, so the op's meaning is pinned by more than its own reference.
  /// Other primitives have hand-written cases in tests/test_primitive_values.cpp.
  std::vector<KnownValue> (*known_values)() = nullptr;
  /// Primitives: whether the op keeps groups of rows along dim 0 apart. The result and the
  /// operands marked `taken` have dim 0 split into `groups` blocks of consecutive rows (one per
  /// example of a batch); the other operands are used whole. True means that computing the op
  /// on the same selection of groups of every taken operand gives those groups of the result:
  /// op(groups(x)) == groups(op(x)). Types are those of the whole computation. In-step sifting
  /// (jit/passes share_taken_rows) reads this to reuse a whole batch's forward values for its
  /// kept rows. Null: never (the op mixes rows, or makes values from nothing).
  bool (*row_wise)(std::span<const TensorType> operands, std::span<const bool> taken,
                   const Attrs& attrs, const TensorType& result, int64_t groups) = nullptr;
};

const OpDef& op_def(OpId op);
/// `v` as a value of type `t` holds it: floats round to nearest even (bf16/f16 with their
/// range: overflow gives infinity, tiny values are subnormal), integers truncate, bool is 0/1.
double round_to_dtype(double v, DType t);
std::optional<OpId> op_by_name(std::string_view name);
inline bool has_gradient(OpId op) { return op_def(op).differentiable; }

/// The whole graph checked: its structure (Graph::verify), then every node's arity and stored
/// type against its op's rule. Throws VerifyError naming the first broken node.
void verify(const Graph& graph);

// Each family file defines the OpDefs of its ops; the registry collects them by OpId.
namespace op_defs {
#define SINTER_PRIMITIVE(name) extern const OpDef name##_op;
#define SINTER_COMPOSITE(name) extern const OpDef name##_op;
#include "ops/op_list.def"
} // namespace op_defs

} // namespace sinter
