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

/// The op applied to random operands; `narrow` turns float64 operands into float32.
Graph op_graph(OpId op, const OpTestCase& c, bool narrow, std::vector<F64Tensor>& values,
               uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<NamedOperand> operands;
  for (std::size_t i = 0; i < c.operands.size(); ++i) {
    TestOperand spec = c.operands[i];
    F64Tensor v = random_operand(spec, rng);
    if (narrow && spec.dtype == DType::f64) spec.dtype = DType::f32;
    // Both sides must see the values the typed input really holds.
    if (spec.dtype == DType::f32)
      for (double& x : v.data)
        x = static_cast<float>(x);
    operands.push_back({"x" + std::to_string(i), TensorType{spec.dtype, spec.shape}, v});
  }
  values = values_of(operands);
  return build_graph(operands, [&](Graph& g, std::vector<Value>& in) {
    return std::vector<Value>{emit(g, op, in, c.attrs)};
  });
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
    Graph g = op_graph(op, cases[k], false, values, 7000 + 100 * static_cast<uint64_t>(op) + k);
    TensorType result = g.type(g.outputs()[0].id);
    if (result.dtype != DType::f64) continue;
    std::vector<std::string> wrt;
    for (const NamedValue& in : g.inputs())
      if (is_float(g.type(in.id).dtype)) wrt.push_back(in.name);
    if (wrt.empty()) continue;
    // loss = sum(op(x) * r) with r a fixed input, so every output element gets a cotangent.
    Graph lossy;
    std::vector<Value> ins;
    for (const NamedValue& in : g.inputs())
      ins.push_back(input(lossy, in.name, g.type(in.id)));
    Value r = input(lossy, "r", result);
    lossy.add_output("loss", sum(emit(lossy, op, ins, cases[k].attrs) * r).id);
    std::mt19937_64 rng(k);
    values.push_back(random_operand(TestOperand{DType::f64, result.shape}, rng));
    Graph optimized =
        Pipeline::standard(AutodiffOptions{wrt, 0}).run(lossy, DumpSelection(""), std::cerr);
    compare(optimized, values, 1e-10);
  }
}

const bool forward_compiled_registered = register_op_tests<forward_compiled>(
    "compiled on the CPU matches the interpreter (f64 and f32)", "[cpu][cpu-forward]");
const bool gradient_compiled_registered = register_op_tests<gradient_compiled>(
    "compiled gradient matches the interpreter", "[cpu][cpu-gradient]", true);

} // namespace
} // namespace sinter::testing
