// tests/test_cpu_generated.cpp — every registered op compiled on the CPU vs the interpreter,
// forward and gradients in f64, f32, bf16 and f16, generated from the registry like the reference
// tests
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
  check_outputs_match(optimized, got, want, tolerance);
}

void forward_compiled(OpId op) {
  for_each_forward_case(op, [](const Graph& g, const std::vector<F64Tensor>& values, DType t) {
    compare(g, values, backend_tolerance(t, false));
  });
}

void gradient_compiled(OpId op) {
  for_each_gradient_case(op, [](const Graph& g, const std::vector<F64Tensor>& values, DType t) {
    compare(g, values, backend_tolerance(t, true));
  });
}

const bool forward_compiled_registered = register_op_tests<forward_compiled>(
    "compiled on the CPU matches the interpreter (f64, f32, bf16, f16)", "[cpu][cpu-forward]");
const bool gradient_compiled_registered = register_op_tests<gradient_compiled>(
    "compiled gradient matches the interpreter", "[cpu][cpu-gradient]", differentiable_op);

} // namespace
} // namespace sinter::testing
