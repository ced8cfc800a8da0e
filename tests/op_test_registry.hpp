// tests/op_test_registry.hpp — registers one Catch2 test case per op in ops/op_list.def
#pragma once
#include "ops/registry.hpp"

#include <catch2/catch.hpp>

#include <deque>
#include <string>
#include <utility>

namespace sinter::testing {

template <void (*Check)(OpId), std::size_t I> void run_for_op() { Check(static_cast<OpId>(I)); }

/// Adds "op <name>: <property>" for every op (graph inputs aside; `differentiable_only` keeps
/// ops with a gradient), so a new op in the registry is tested without a new test being written.
template <void (*Check)(OpId), std::size_t... I>
bool register_op_tests(const char* property, const char* tags, bool differentiable_only,
                       std::index_sequence<I...>) {
  static std::deque<std::string> names; // Catch2 keeps pointers to the names
  static std::deque<Catch::AutoReg> registrations;
  auto add = [&](OpId op, void (*fn)()) {
    if (op == OpId::input || (differentiable_only && !op_def(op).differentiable)) return;
    names.push_back("op " + std::string(op_name(op)) + ": " + property);
    registrations.emplace_back(Catch::makeTestInvoker(fn), CATCH_INTERNAL_LINEINFO,
                               Catch::StringRef(), Catch::NameAndTags{names.back().c_str(), tags});
  };
  (add(static_cast<OpId>(I), &run_for_op<Check, I>), ...);
  return true;
}

template <void (*Check)(OpId)>
bool register_op_tests(const char* property, const char* tags, bool differentiable_only = false) {
  return register_op_tests<Check>(property, tags, differentiable_only,
                                  std::make_index_sequence<num_ops>{});
}

} // namespace sinter::testing
