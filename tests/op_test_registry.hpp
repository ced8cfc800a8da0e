// tests/op_test_registry.hpp — registers one Catch2 test case per op in ops/op_list.def
#pragma once
#include "ops/registry.hpp"

#include <catch2/catch.hpp>

#include <deque>
#include <string>
#include <utility>

namespace sinter::testing {

template <void (*Check)(OpId), std::size_t I> void run_for_op() { Check(static_cast<OpId>(I)); }

/// Which ops a property is registered for.
using OpSelector = bool (*)(const OpDef&);
inline bool every_op(const OpDef&) { return true; }
inline bool differentiable_op(const OpDef& def) { return def.differentiable; }

/// Adds "op <name>: <property>" for every op that `selected` accepts (graph inputs aside), so a
/// new op in the registry is tested without a new test being written.
template <void (*Check)(OpId), std::size_t... I>
bool register_op_tests(const char* property, const char* tags, OpSelector selected,
                       std::index_sequence<I...>) {
  static std::deque<std::string> names; // Catch2 keeps pointers to the names
  static std::deque<Catch::AutoReg> registrations;
  auto add = [&](OpId op, void (*fn)()) {
    if (op == OpId::input || !selected(op_def(op))) return;
    names.push_back("op " + std::string(op_name(op)) + ": " + property);
    registrations.emplace_back(Catch::makeTestInvoker(fn), CATCH_INTERNAL_LINEINFO,
                               Catch::StringRef(), Catch::NameAndTags{names.back().c_str(), tags});
  };
  (add(static_cast<OpId>(I), &run_for_op<Check, I>), ...);
  return true;
}

template <void (*Check)(OpId)>
bool register_op_tests(const char* property, const char* tags, OpSelector selected = every_op) {
  return register_op_tests<Check>(property, tags, selected, std::make_index_sequence<num_ops>{});
}

} // namespace sinter::testing
