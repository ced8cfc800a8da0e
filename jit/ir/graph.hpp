// jit/ir/graph.hpp — the one IR: SSA nodes in an arena with u32 ids, hash-consed, typed
#pragma once
#include "jit/ir/dtype.hpp"
#include "jit/ir/shape.hpp"
#include "ops/op_id.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sinter {

using ValueId = uint32_t;

/// Op-specific attributes; each op's file documents what it stores in which field.
struct Attrs {
  std::vector<int64_t> ints;  ///< axes, permutation, target shape, slice starts, ...
  std::vector<int64_t> ints2; ///< slice limits, pad highs, iota axis, ...
  double real = 0.0;          ///< constant value, epsilon
  bool flag = false;          ///< keepdims
  DType dtype = DType::f32;   ///< result dtype of constant, iota, cast
  bool operator==(const Attrs&) const = default;
};

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;
  bool operator==(const TensorType&) const = default;
};

std::string to_string(const TensorType& t);

/// Bytes of one dense row-major tensor of type `t`.
inline std::size_t byte_size(const TensorType& t) {
  return static_cast<std::size_t>(numel(t.shape)) * dtype_bytes(t.dtype);
}

/// One SSA value. Inputs always have smaller ids than the node (the arena is topologically sorted).
struct Node {
  OpId op = OpId::constant;
  TensorType type;
  std::vector<ValueId> inputs;
  Attrs attrs;
  uint32_t scope = 0; ///< index into Graph's scope table: the model path that created the node
};

/// A shape or type error found while building the graph (at trace time).
struct ShapeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A graph that failed its structural checks: a bug in a pass, not in user code.
struct VerifyError : std::logic_error {
  using std::logic_error::logic_error;
};

/// Precision a user asked for over a region of the model (dsl's amp::region); the autocast
/// pass reads it. `policy` leaves each op to its own precision rule.
enum class RegionPrecision : uint8_t { policy, fp32, low };

struct NamedValue {
  std::string name;
  ValueId id;
};

/// An output that replaces an input of the same type (a training step's `new.w` replacing `w`):
/// a run may store the output over the input's buffer instead of in one of its own, and the
/// input's value is then gone after the run. Backends that keep inputs on a device between
/// runs use it (CUDA: no second buffer and no copy for parameters and optimizer state); the
/// others ignore it. Indices into inputs() and outputs().
struct Donation {
  std::size_t input = 0, output = 0;
  bool operator==(const Donation&) const = default;
};

class Graph {
public:
  Graph();

  /// Adds a node, or returns the id of an identical existing node (hash-consing).
  ValueId add(Node node);
  /// Adds a node even when an identical one exists: a value computed a second time on purpose
  /// (rematerialisation), which hash-consing would otherwise merge back into the first.
  ValueId add_recomputed(Node node);
  /// Whether `id` was added by add_recomputed: a second computation, meant to run where it is.
  bool recomputed(ValueId id) const {
    return std::binary_search(recomputed_.begin(), recomputed_.end(), id);
  }
  ValueId add_input(std::string name, TensorType type);
  void add_output(std::string name, ValueId id);

  const Node& node(ValueId id) const { return nodes_[id]; }
  /// The id of `n`, a node of this graph (as a rewrite is handed one, by reference).
  ValueId id_of(const Node& n) const { return static_cast<ValueId>(&n - nodes_.data()); }
  const TensorType& type(ValueId id) const { return nodes_[id].type; }
  std::size_t size() const { return nodes_.size(); }
  const std::vector<NamedValue>& inputs() const { return inputs_; }
  const std::vector<NamedValue>& outputs() const { return outputs_; }
  std::vector<NamedValue>& mutable_outputs() { return outputs_; }
  /// Declares that output `output` replaces input `input` (Donation); verify() checks that the
  /// two have one type and that each input and output is donated at most once.
  void donate(std::size_t input, std::size_t output) { donations_.push_back({input, output}); }
  const std::vector<Donation>& donations() const { return donations_; }
  /// A rebuilt graph keeps the donations of the one it was built from (the same inputs and
  /// outputs, in the same order).
  void set_donations(std::vector<Donation> donations) { donations_ = std::move(donations); }

  /// Model path scopes (`blocks.3.attn`) recorded on each node, for errors and profiling.
  /// A scope also carries the region precision its nodes were traced under (inherited).
  void push_scope(std::string_view name);
  /// Enters the scope of a whole path (`enc.layers.0`), whatever the current one; pop_scope
  /// returns to the current one.
  void push_path(std::string_view path);
  /// Enters a region of the same path whose nodes compute in `precision` under autocast.
  void push_precision(RegionPrecision precision);
  /// Leaves the scope the last push_* entered, back to the one it was called in.
  void pop_scope();
  uint32_t current_scope() const { return current_scope_; }
  void set_current_scope(uint32_t scope) { current_scope_ = scope; }
  std::size_t scope_count() const { return scopes_.size(); }
  uint32_t intern_scope(const std::string& path,
                        RegionPrecision precision = RegionPrecision::policy);
  const std::string& scope_path(uint32_t scope) const { return scopes_[scope]; }
  RegionPrecision scope_precision(uint32_t scope) const { return scope_precision_[scope]; }

  /// Structural checks (known ops, operands defined before use, inputs and outputs); throws
  /// VerifyError naming the first broken node. Types are checked by sinter::verify (ops/).
  void verify() const;
  /// Stable, readable text form (same graph → same text).
  std::string print() const;

private:
  std::vector<Node> nodes_;
  std::vector<NamedValue> inputs_;
  std::vector<NamedValue> outputs_;
  std::vector<Donation> donations_;
  std::unordered_map<uint64_t, std::vector<ValueId>> by_hash_;
  std::vector<ValueId> recomputed_; ///< ascending
  std::vector<std::string> scopes_;
  std::vector<uint32_t> entered_; ///< the scope each push_* left, innermost last
  std::vector<RegionPrecision> scope_precision_;
  uint32_t current_scope_ = 0;
};

} // namespace sinter
