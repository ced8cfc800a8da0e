// jit/runtime/kernel_lookup.cpp — structural kernel keys: a kernel's cache identity from its IR
#include "jit/runtime/kernel_lookup.hpp"

#include <algorithm>
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
  for (std::size_t i = 0; i < kernel.body.size(); ++i) {
    ValueId v = kernel.body[i];
    const Node& n = g.node(v);
    bool in_memory = !kernel.writes(v) && (plan.materialized[v] || plan.view_of[v] != v);
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

} // namespace sinter
