// tests/test_passes.cpp — autodiff, lower, simplify, cse and the pipeline's IR dumps
#include "numeric_check.hpp"

#include <catch2/catch.hpp>

#include <sstream>

using namespace sinter;
using namespace sinter::testing;

namespace {

std::size_t count_op(const Graph& g, OpId op) {
  std::size_t n = 0;
  for (ValueId id = 0; id < g.size(); ++id)
    n += g.node(id).op == op;
  return n;
}

Graph run_standard(const Graph& g, std::optional<AutodiffOptions> ad = std::nullopt) {
  return Pipeline::standard(std::move(ad)).run(g, DumpSelection(""), std::cerr);
}

} // namespace

TEST_CASE("simplify removes multiplications by one, additions of zero and double negation",
          "[passes]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {4}});
  g.add_output("y", (-(-((x * 1.0) + 0.0)) / 1.0).id);
  Graph s = simplify(g);
  CHECK(s.outputs()[0].id == s.inputs()[0].id);
  CHECK(s.size() == 1);
}

TEST_CASE("simplify cancels a transpose of a transpose", "[passes]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {2, 3, 4}});
  g.add_output("y", transpose(transpose(x, 0, 2), 0, 2).id);
  Graph s = run_standard(g);
  CHECK(s.outputs()[0].id == s.inputs()[0].id);
}

TEST_CASE("simplify folds arithmetic on constants", "[passes]") {
  Graph g;
  Value x = input(g, "x", {DType::f64, {3}});
  Value two = constant(g, 2.0, DType::f64), three = constant(g, 3.0, DType::f64);
  g.add_output("y", (x * exp(two - two) * (two + three)).id);
  Graph s = run_standard(g);
  CHECK(count_op(s, OpId::exp) == 0);
  CHECK(count_op(s, OpId::add) == 0);
  CHECK(count_op(s, OpId::mul) == 1);
  auto out = interpret(s, std::vector<F64Tensor>{F64Tensor{{3}, {1, 2, 3}}})[0];
  CHECK(out.data == std::vector<double>{5, 10, 15});
}

TEST_CASE("cse removes dead nodes and keeps one copy of shared work", "[passes]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {3}});
  exp(x) * 3.0; // dead
  Value t = tanh(x);
  g.add_output("y", (t + t).id);
  Graph c = cse(g);
  CHECK(count_op(c, OpId::exp) == 0);
  CHECK(count_op(c, OpId::tanh) == 1);
}

TEST_CASE("lower leaves only primitives", "[passes]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {2, 5}});
  Value gamma = input(g, "gamma", {DType::f32, {5}});
  Value beta = input(g, "beta", {DType::f32, {5}});
  g.add_output("y", log_softmax(gelu_tanh(layernorm(x, gamma, beta))).id);
  Graph l = lower(g);
  for (ValueId id = 0; id < l.size(); ++id)
    CHECK(is_primitive(l.node(id).op));
  CHECK(count_op(l, OpId::stop_gradient) == 0);
}

TEST_CASE("autodiff refuses a gradient with respect to an integer input", "[passes][errors]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {2, 3}});
  Value labels = input(g, "labels", {DType::i32, {2}});
  g.add_output("loss", cross_entropy_mean(x, labels).id);
  CHECK_THROWS_WITH(autodiff(g, {{"labels"}, 0}),
                    Catch::Contains("input 'labels' (i32)") &&
                        Catch::Contains("only for floating-point inputs"));
  CHECK_THROWS_WITH(autodiff(g, {{"weights"}, 0}), Catch::Contains("no such input"));
}

TEST_CASE("autodiff differentiates only the inputs asked for", "[passes]") {
  Graph g;
  Value a = input(g, "a", {DType::f64, {3}});
  Value b = input(g, "b", {DType::f64, {3}});
  g.add_output("loss", sum(a * b).id);
  Graph d = run_standard(g, AutodiffOptions{{"b"}, 0});
  REQUIRE(d.outputs().size() == 2);
  CHECK(d.outputs()[1].name == "grad:b");
  auto out =
      interpret(d, std::vector<F64Tensor>{F64Tensor{{3}, {1, 2, 3}}, F64Tensor{{3}, {4, 5, 6}}});
  CHECK(out[1].data == std::vector<double>{1, 2, 3});
}

TEST_CASE("stop_gradient blocks the gradient but not the value", "[passes]") {
  Graph g;
  Value x = input(g, "x", {DType::f64, {2}});
  g.add_output("loss", sum(stop_gradient(x) * x).id);
  Graph d = run_standard(g, AutodiffOptions{{"x"}, 0});
  auto out = interpret(d, std::vector<F64Tensor>{F64Tensor{{2}, {3, -1}}});
  CHECK(out[0].data[0] == 10);
  CHECK(out[1].data == std::vector<double>{3, -1});
}

TEST_CASE("an input the loss does not use gets a zero gradient", "[passes]") {
  Graph g;
  Value x = input(g, "x", {DType::f64, {2}});
  input(g, "unused", {DType::f64, {3}});
  g.add_output("loss", sum(x * x).id);
  Graph d = run_standard(g, AutodiffOptions{{"unused"}, 0});
  auto out =
      interpret(d, std::vector<F64Tensor>{F64Tensor{{2}, {1, 2}}, F64Tensor{{3}, {1, 2, 3}}});
  CHECK(out[1].data == std::vector<double>{0, 0, 0});
}

TEST_CASE("the pipeline dumps the IR after the passes selected", "[passes]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {3}});
  g.add_output("y", sigmoid(x).id);
  std::ostringstream dump;
  Pipeline::standard(std::nullopt).run(g, DumpSelection("lower"), dump);
  CHECK_THAT(dump.str(), Catch::Contains("// sinter IR after lower") &&
                             !Catch::Contains("after simplify") && Catch::Contains("= exp"));
  std::ostringstream all;
  Pipeline::standard(AutodiffOptions{}).run(g, DumpSelection("all"), all);
  for (const char* pass : {"trace", "autodiff", "lower", "simplify", "cse"})
    CHECK_THAT(all.str(), Catch::Contains(std::string("after ") + pass));
}
