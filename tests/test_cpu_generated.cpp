// tests/test_cpu_generated.cpp — every registered op compiled on the CPU vs the interpreter,
// forward (f64 and f32) and gradients, generated from the registry like the reference tests
#include "backend_check.hpp"

#include "op_test_registry.hpp"

#include <catch2/catch.hpp>

namespace sinter::testing {
namespace {

TestBackend& shared_backend() {
  static TestBackend backend("sinter-cpu-ops");
  return backend;
}

void compare(const Graph& optimized, const std::vector<F64Tensor>& values, double tolerance) {
  std::vector<F64Tensor> want = interpret(optimized, values);
  CpuExecutable exe(optimized, *shared_backend().library, shared_backend().pool);
  std::vector<HostTensor> got = exe.run(as_host(optimized, values));
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("output " << optimized.outputs()[i].name << " "
                   << to_string(optimized.type(optimized.outputs()[i].id)));
    // The interpreter keeps float64 between ops; compiled f32 rounds at every op.
    F64Tensor expected = want[i];
    if (optimized.type(optimized.outputs()[i].id).dtype == DType::f32)
      for (double& x : expected.data)
        x = static_cast<float>(x);
    CHECK(max_relative_difference(to_f64(got[i]), expected) <= tolerance);
  }
}

void forward_compiled(OpId op) {
  auto cases = op_def(op).test_cases();
  for (std::size_t k = 0; k < cases.size(); ++k) {
    for (bool narrow : {false, true}) {
      INFO(op_name(op) << " case " << k << (narrow ? " (f32)" : " (f64)"));
      std::vector<F64Tensor> values;
      Graph g = op_graph(op, cases[k], narrow, values, 5000 + 100 * static_cast<uint64_t>(op) + k);
      Graph optimized = Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr);
      if (narrow) {
        // Interpret the graph on the values the f32 inputs really hold.
        compare(optimized, values, 2e-5);
      } else {
        compare(optimized, values, 1e-12);
      }
    }
  }
}

void gradient_compiled(OpId op) {
  auto cases = op_def(op).test_cases();
  for (std::size_t k = 0; k < cases.size(); ++k) {
    INFO(op_name(op) << " case " << k);
    std::vector<F64Tensor> values;
    auto graph =
        gradient_graph(op, cases[k], values, 7000 + 100 * static_cast<uint64_t>(op) + k, k);
    if (graph) compare(*graph, values, 1e-10);
  }
}

const bool forward_compiled_registered = register_op_tests<forward_compiled>(
    "compiled on the CPU matches the interpreter (f64 and f32)", "[cpu][cpu-forward]");
const bool gradient_compiled_registered = register_op_tests<gradient_compiled>(
    "compiled gradient matches the interpreter", "[cpu][cpu-gradient]", true);

} // namespace
} // namespace sinter::testing
