// jit/runtime/kernel_lookup.cpp — structural kernel keys: a kernel's cache identity from its IR
#include "jit/runtime/kernel_lookup.hpp"

#include <algorithm>
#include <cctype>
#include <map>

namespace sinter {
namespace {

void add_type(KeyHasher& h, const TensorType& t) {
  h.add(static_cast<uint64_t>(t.dtype));
  h.add(t.shape.size());
  for (int64_t d : t.shape)
    h.add(static_cast<uint64_t>(d));
}

void add_ints(KeyHasher& h, const std::vector<int64_t>& v) {
  h.add(v.size());
  for (int64_t x : v)
    h.add(static_cast<uint64_t>(x));
}

} // namespace

CacheKey kernel_key(const FusionPlan& plan, const Kernel& kernel, const std::string& fingerprint) {
  const Graph& g = *plan.graph;
  KeyHasher h;
  h.add("sinter-kernel-v2");
  h.add(fingerprint);
  h.add(static_cast<uint64_t>(kernel.kind));
  // Buffers are numbered by their position in `reads`, body nodes by their position in `body`:
  // the key depends on the kernel's structure, never on graph-wide ids.
  std::map<ValueId, uint64_t> local;
  for (std::size_t i = 0; i < kernel.reads.size(); ++i)
    local.emplace(kernel.reads[i], i);
  h.add(kernel.reads.size());
  for (ValueId r : kernel.reads)
    add_type(h, g.type(r));
  h.add(kernel.in_place() ? 1 + local.at(kernel.overwrites) : 0);
  // Outputs stored over a read (a donated input): those two buffers alias in the code.
  std::vector<ValueId> outputs = kernel.outputs();
  for (auto [out, in] : kernel.over_inputs)
    if (auto read = local.find(in); read != local.end()) {
      h.add("over input");
      h.add(
          static_cast<uint64_t>(std::find(outputs.begin(), outputs.end(), out) - outputs.begin()));
      h.add(read->second);
    }
  for (std::size_t i = 0; i < kernel.body.size(); ++i) {
    ValueId v = kernel.body[i];
    const Node& n = g.node(v);
    bool in_memory = plan.loads(kernel, v);
    // Which output (1: the root, 2...: extra outputs in order) or none (0).
    auto extra = std::find(kernel.extra_outputs.begin(), kernel.extra_outputs.end(), v);
    h.add(v == kernel.root ? 1
          : extra != kernel.extra_outputs.end()
              ? 2 + static_cast<uint64_t>(extra - kernel.extra_outputs.begin())
              : 0);
    add_type(h, n.type);
    if (in_memory) {
      h.add("load");
      h.add(local.at(plan.view_of[v]));
      continue;
    }
    h.add(static_cast<uint64_t>(n.op));
    add_ints(h, n.attrs.ints);
    add_ints(h, n.attrs.ints2);
    h.add_double(n.attrs.real);
    h.add(n.attrs.flag);
    h.add(static_cast<uint64_t>(n.attrs.dtype));
    h.add(n.inputs.size());
    for (ValueId in : n.inputs) {
      auto pos = std::find(kernel.body.begin(), kernel.body.end(), in);
      if (pos != kernel.body.end()) {
        h.add("body");
        h.add(static_cast<uint64_t>(pos - kernel.body.begin()));
      } else {
        h.add("buffer");
        h.add(local.at(plan.view_of[in]));
      }
    }
  }
  return h.finish();
}

namespace {
constexpr std::string_view payload_tag = "SINTER-SYMBOL:";
} // namespace

std::string kernel_symbol(const FusionPlan& plan, const Kernel& kernel, const CacheKey& key) {
  const Graph& g = *plan.graph;
  const Node& root = g.node(kernel.root);
  // Path segments joined by '_', numbers read N, anything outside [A-Za-z0-9_] dropped.
  std::string path;
  std::string_view rest = g.scope_path(root.scope);
  while (!rest.empty()) {
    std::size_t dot = rest.find('.');
    std::string_view segment = rest.substr(0, dot);
    rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
    bool number = !segment.empty() && std::all_of(segment.begin(), segment.end(),
                                                  [](char c) { return c >= '0' && c <= '9'; });
    std::string clean;
    for (char c : number ? std::string_view("N") : segment)
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') clean += c;
    if (!clean.empty()) path += clean + "_";
  }
  constexpr std::size_t max_path = 72; // keep the innermost part of a long path
  if (path.size() > max_path) path = path.substr(path.size() - max_path);
  return "sinter_" + path + kernel_kind_name(kernel.kind) + "_" + std::string(op_name(root.op)) +
         "_" + key.hex();
}

std::vector<char> named_payload(const std::string& symbol, std::span<const char> binary) {
  std::string head = std::string(payload_tag) + symbol;
  head.push_back('\0');
  std::vector<char> out;
  out.reserve(head.size() + binary.size());
  out.insert(out.end(), head.begin(), head.end());
  out.insert(out.end(), binary.begin(), binary.end());
  return out;
}

std::optional<std::pair<std::string, std::vector<char>>>
split_named_payload(std::span<const char> payload) {
  if (payload.size() < payload_tag.size() ||
      !std::equal(payload_tag.begin(), payload_tag.end(), payload.begin()))
    return std::nullopt;
  auto end = std::find(payload.begin() + static_cast<std::ptrdiff_t>(payload_tag.size()),
                       payload.end(), '\0');
  if (end == payload.end()) return std::nullopt;
  std::string symbol(payload.begin() + static_cast<std::ptrdiff_t>(payload_tag.size()), end);
  return std::pair{std::move(symbol), std::vector<char>(end + 1, payload.end())};
}

} // namespace sinter

namespace sinter {

std::string CompileReport::print(const FusionPlan& plan) const {
  std::string out = "kernels: " + std::to_string(kernels) + " (" + std::to_string(compiled) +
                    " compiled, " + std::to_string(from_disk) + " loaded from the disk cache, " +
                    std::to_string(from_memory) + " reused in memory, " +
                    std::to_string(kernels - generated) + " library calls)\n";
  for (std::size_t i = 0; i < plan.kernels.size(); ++i) {
    const Kernel& k = plan.kernels[i];
    out += "  kernel " + std::to_string(i) + " " + kernel_kind_name(k.kind) + " -> %" +
           std::to_string(k.root);
    auto origin = std::find_if(origins.begin(), origins.end(),
                               [&](const KernelOrigin& o) { return o.root == k.root; });
    if (origin == origins.end()) {
      out += "  library\n";
      continue;
    }
    const char* from = origin->from == KernelOrigin::From::compiled ? "compiled"
                       : origin->from == KernelOrigin::From::disk   ? "disk cache"
                                                                    : "memory";
    out += std::string("  ") + from + "  " + origin->symbol + "\n";
  }
  return out;
}

} // namespace sinter
