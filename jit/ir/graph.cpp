// jit/ir/graph.cpp — node arena with hash-consing, scopes, verification and printing
#include "jit/ir/graph.hpp"

#include <bit>
#include <charconv>
#include <sstream>

namespace sinter {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 12) + (h >> 4);
  return h * 0xff51afd7ed558ccdULL;
}

uint64_t hash_node(const Node& n) {
  uint64_t h = mix(static_cast<uint64_t>(n.op), static_cast<uint64_t>(n.type.dtype));
  for (int64_t d : n.type.shape)
    h = mix(h, static_cast<uint64_t>(d));
  h = mix(h, 0xabcdef);
  for (ValueId v : n.inputs)
    h = mix(h, v);
  h = mix(h, 0x123457);
  for (int64_t a : n.attrs.ints)
    h = mix(h, static_cast<uint64_t>(a));
  h = mix(h, 0x777);
  for (int64_t a : n.attrs.ints2)
    h = mix(h, static_cast<uint64_t>(a));
  h = mix(h, std::bit_cast<uint64_t>(n.attrs.real));
  h = mix(h, n.attrs.flag);
  return mix(h, static_cast<uint64_t>(n.attrs.dtype));
}

bool same_node(const Node& a, const Node& b) {
  return a.op == b.op && a.type == b.type && a.inputs == b.inputs && a.attrs == b.attrs;
}

std::string format_real(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string format_ints(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i)
    out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

bool carries_dtype_attr(OpId op) {
  return op == OpId::input || op == OpId::constant || op == OpId::iota || op == OpId::cast;
}

} // namespace

std::string to_string(const TensorType& t) {
  return std::string(dtype_name(t.dtype)) + to_string(t.shape);
}

Graph::Graph() {
  scopes_.push_back("");
  scope_precision_.push_back(RegionPrecision::policy);
}

ValueId Graph::add(Node node) {
  node.scope = node.op == OpId::input ? 0 : current_scope_;
  uint64_t h = hash_node(node);
  auto& bucket = by_hash_[h];
  // Equal nodes traced under different region precisions stay apart: autocast types them apart.
  for (ValueId id : bucket)
    if (same_node(nodes_[id], node) &&
        scope_precision_[nodes_[id].scope] == scope_precision_[node.scope])
      return id;
  auto id = static_cast<ValueId>(nodes_.size());
  nodes_.push_back(std::move(node));
  bucket.push_back(id);
  return id;
}

ValueId Graph::add_recomputed(Node node) {
  node.scope = current_scope_;
  nodes_.push_back(std::move(node));
  recomputed_.push_back(static_cast<ValueId>(nodes_.size() - 1));
  return recomputed_.back();
}

ValueId Graph::add_input(std::string name, TensorType type) {
  Node n;
  n.op = OpId::input;
  n.attrs.ints = type.shape;
  n.attrs.ints2 = {static_cast<int64_t>(inputs_.size())};
  n.attrs.dtype = type.dtype;
  n.type = std::move(type);
  ValueId id = add(std::move(n));
  inputs_.push_back({std::move(name), id});
  return id;
}

void Graph::add_output(std::string name, ValueId id) { outputs_.push_back({std::move(name), id}); }

uint32_t Graph::intern_scope(const std::string& path, RegionPrecision precision) {
  for (uint32_t i = 0; i < scopes_.size(); ++i)
    if (scopes_[i] == path && scope_precision_[i] == precision) return i;
  scopes_.push_back(path);
  scope_precision_.push_back(precision);
  return static_cast<uint32_t>(scopes_.size() - 1);
}

// Entered scopes form a stack of their own: one scope (one path and precision) can be entered
// again from inside itself, e.g. a Linear's scope from the MLP's `layers.0` scope of the same
// path, and leaving it must return to where each entry came from.
void Graph::push_scope(std::string_view name) {
  const std::string& base = scopes_[current_scope_];
  std::string path = base.empty() ? std::string(name) : base + "." + std::string(name);
  entered_.push_back(current_scope_);
  current_scope_ = intern_scope(path, scope_precision_[current_scope_]);
}

void Graph::push_path(std::string_view path) {
  entered_.push_back(current_scope_);
  current_scope_ = intern_scope(std::string(path), scope_precision_[current_scope_]);
}

void Graph::push_precision(RegionPrecision precision) {
  entered_.push_back(current_scope_);
  current_scope_ = intern_scope(scopes_[current_scope_], precision);
}

void Graph::pop_scope() {
  if (entered_.empty()) { // more pops than pushes: the guards are scoped, so only the root
    current_scope_ = 0;
    return;
  }
  current_scope_ = entered_.back();
  entered_.pop_back();
}

void Graph::verify() const {
  auto fail = [&](ValueId id, const std::string& what) {
    throw VerifyError("sinter: IR verification failed at %" + std::to_string(id) + " (" +
                      std::string(op_name(nodes_[id].op)) + "): " + what);
  };
  std::size_t input_count = 0;
  for (ValueId id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (static_cast<std::size_t>(n.op) >= num_ops) fail(id, "unknown op");
    for (ValueId in : n.inputs)
      if (in >= id) fail(id, "operand %" + std::to_string(in) + " is not defined before use");
    if (n.op == OpId::input) ++input_count;
  }
  if (input_count != inputs_.size()) throw VerifyError("sinter: input nodes and input list differ");
  for (const NamedValue& in : inputs_)
    if (in.id >= nodes_.size() || nodes_[in.id].op != OpId::input)
      throw VerifyError("sinter: graph input '" + in.name + "' is not an input node");
  for (const NamedValue& out : outputs_)
    if (out.id >= nodes_.size())
      throw VerifyError("sinter: graph output '" + out.name + "' refers to a missing node");
  std::vector<bool> input_donated(inputs_.size(), false), output_donated(outputs_.size(), false);
  for (const Donation& d : donations_) {
    if (d.input >= inputs_.size() || d.output >= outputs_.size())
      throw VerifyError("sinter: donation of input " + std::to_string(d.input) + " to output " +
                        std::to_string(d.output) + " names no such input or output (" +
                        std::to_string(inputs_.size()) + " inputs, " +
                        std::to_string(outputs_.size()) + " outputs)");
    const NamedValue& in = inputs_[d.input];
    const NamedValue& out = outputs_[d.output];
    if (!(nodes_[in.id].type == nodes_[out.id].type))
      throw VerifyError("sinter: input '" + in.name + "' (" + to_string(nodes_[in.id].type) +
                        ") is donated to output '" + out.name + "' (" +
                        to_string(nodes_[out.id].type) + "): a donation needs one type");
    if (input_donated[d.input] || output_donated[d.output])
      throw VerifyError("sinter: input '" + in.name + "' or output '" + out.name +
                        "' is donated twice: each at most once");
    input_donated[d.input] = output_donated[d.output] = true;
  }
}

std::string Graph::print() const {
  std::ostringstream os;
  os << "graph(";
  for (std::size_t i = 0; i < inputs_.size(); ++i)
    os << (i ? ", " : "") << "%" << inputs_[i].id << " " << inputs_[i].name << ": "
       << to_string(nodes_[inputs_[i].id].type);
  os << ") {\n";
  for (ValueId id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    if (n.op == OpId::input) continue;
    os << "  %" << id << " = " << op_name(n.op);
    for (std::size_t i = 0; i < n.inputs.size(); ++i)
      os << (i ? ", %" : " %") << n.inputs[i];
    if (!n.attrs.ints.empty() && n.op != OpId::constant) os << " " << format_ints(n.attrs.ints);
    if (!n.attrs.ints2.empty()) os << " " << format_ints(n.attrs.ints2);
    if (n.attrs.real != 0.0 || n.op == OpId::constant) os << " " << format_real(n.attrs.real);
    if (n.attrs.flag) os << " keepdims";
    if (carries_dtype_attr(n.op) && n.op != OpId::constant) os << " " << dtype_name(n.attrs.dtype);
    os << " : " << to_string(n.type);
    if (n.scope != 0) os << "  @" << scopes_[n.scope];
    if (scope_precision_[n.scope] != RegionPrecision::policy)
      os << (scope_precision_[n.scope] == RegionPrecision::fp32 ? "  [fp32 region]"
                                                                : "  [low-precision region]");
    os << "\n";
  }
  os << "  return";
  for (std::size_t i = 0; i < outputs_.size(); ++i)
    os << (i ? ", " : " ") << outputs_[i].name << "=%" << outputs_[i].id;
  for (const Donation& d : donations_)
    os << "\n  donated " << inputs_[d.input].name << " -> " << outputs_[d.output].name;
  os << "\n}\n";
  return os.str();
}

} // namespace sinter
