// tests/test_ir.cpp — the IR: hash-consing, verification, printing and shape errors
#include "jit/ir/graph.hpp"
#include "jit/passes/passes.hpp"
#include "ops/registry.hpp"
#include "ops/value.hpp"

#include <catch2/catch.hpp>

using namespace sinter;

TEST_CASE("identical nodes are hash-consed into one", "[ir]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {3}});
  Value a = exp(x);
  Value b = exp(x);
  CHECK(a.id == b.id);
  CHECK(exp(x + 1.0).id == exp(x + 1.0).id);
  CHECK((x + 1.0).id != (x + 2.0).id);
}

TEST_CASE("verify rejects a node whose stored type disagrees with its operands", "[ir]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {3}});
  Node bad;
  bad.op = OpId::exp;
  bad.inputs = {x.id};
  bad.type = TensorType{DType::f32, {4}};
  g.add(bad);
  CHECK_THROWS_WITH(verify(g), Catch::Contains("stored type f32[4] but operands give f32[3]"));
}

TEST_CASE("verify rejects an operand defined after its use", "[ir]") {
  Graph g;
  Node bad;
  bad.op = OpId::neg;
  bad.inputs = {5};
  bad.type = TensorType{DType::f32, {}};
  g.add(bad);
  CHECK_THROWS_AS(verify(g), VerifyError);
}

TEST_CASE("the printer shows every node with its type, attributes and scope", "[ir]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {2, 3}});
  {
    ScopeGuard scope(g, "head");
    g.add_output("y", sum(exp(x) * 2.0, {1}).id);
  }
  std::string expected = "graph(%0 x: f32[2,3]) {\n"
                         "  %1 = exp %0 : f32[2,3]  @head\n"
                         "  %2 = constant 2 : f32[]  @head\n"
                         "  %3 = broadcast %2 [2,3] : f32[2,3]  @head\n"
                         "  %4 = mul %1, %3 : f32[2,3]  @head\n"
                         "  %5 = sum %4 [1] : f32[2]  @head\n"
                         "  return y=%5\n"
                         "}\n";
  CHECK(g.print() == expected);
  CHECK(g.print() == Graph(g).print());
}

TEST_CASE("a donation pairs an input with the output of its type that replaces it, each once, "
          "and the passes keep it",
          "[ir]") {
  Graph g;
  Value w = input(g, "w", {DType::f32, {4}});
  Value m = input(g, "m", {DType::f32, {4}});
  Value lr = input(g, "lr", {DType::f32, {}});
  g.add_output("new.w", (w - broadcast_to(lr, {4}) * m).id);
  g.add_output("norm", sum(w * w, {0}).id);
  g.donate(0, 0);
  verify(g);
  CHECK_THAT(g.print(), Catch::Contains("donated w -> new.w"));
  // Rebuilt graphs (cse and the other passes) keep the same inputs and outputs, so the pairs.
  CHECK(cse(g).donations() == g.donations());

  Graph twice = g;
  twice.donate(1, 0);
  CHECK_THROWS_WITH(verify(twice), Catch::Contains("donated twice"));
  Graph other_type = g;
  other_type.set_donations({{2, 0}});
  CHECK_THROWS_WITH(verify(other_type), Catch::Contains("a donation needs one type"));
  Graph missing = g;
  missing.set_donations({{0, 5}});
  CHECK_THROWS_WITH(verify(missing), Catch::Contains("names no such input or output"));
}

TEST_CASE("leaving a scope entered again from inside itself returns to where it was entered",
          "[ir]") {
  // An MLP's `layers.0` scope, then its Linear's module scope of the same whole path.
  Graph g;
  Value x = input(g, "x", {DType::f32, {2}});
  {
    ScopeGuard block(g, "blocks.0");
    {
      ScopeGuard layer(g, "mlp.layers.0");
      ScopeGuard linear(g, "blocks.0.mlp.layers.0", ScopeGuard::WholePath{});
      g.add_output("inner", exp(x).id);
    }
    g.add_output("residual", (x + 1.0).id);
  }
  g.add_output("after", (x * 3.0).id);
  auto scope_of = [&](std::size_t output) {
    return g.scope_path(g.node(g.outputs()[output].id).scope);
  };
  CHECK(scope_of(0) == "blocks.0.mlp.layers.0");
  CHECK(scope_of(1) == "blocks.0");
  CHECK(scope_of(2) == "");
  CHECK(g.current_scope() == 0);
}

TEST_CASE("shape errors name the op, the operand shapes and the model path", "[ir][errors]") {
  Graph g;
  Value x = input(g, "x", {DType::f32, {8, 192}});
  Value w = input(g, "w", {DType::f32, {256, 768}});
  ScopeGuard blocks(g, "blocks.2");
  ScopeGuard fc(g, "mlp.fc1");
  CHECK_THROWS_WITH(matmul(x, w), Catch::Contains("matmul at blocks.2.mlp.fc1") &&
                                      Catch::Contains("f32[8,192], f32[256,768]") &&
                                      Catch::Contains("inner dims 192 vs 256"));
}

TEST_CASE("broadcasting incompatible shapes is a clear error", "[ir][errors]") {
  Graph g;
  Value a = input(g, "a", {DType::f32, {3, 2}});
  Value b = input(g, "b", {DType::f32, {4}});
  CHECK_THROWS_WITH(a + b, Catch::Contains("shape error in add") &&
                               Catch::Contains("[3,2] and [4] do not broadcast"));
}

TEST_CASE("mixing dtypes asks for a cast", "[ir][errors]") {
  Graph g;
  Value a = input(g, "a", {DType::f32, {3}});
  Value b = input(g, "b", {DType::i32, {3}});
  CHECK_THROWS_WITH(a * b, Catch::Contains("f32 vs i32") && Catch::Contains("cast"));
  CHECK_THROWS_WITH(exp(b), Catch::Contains("must be floating point, got i32"));
}

TEST_CASE("cross-entropy labels must match the logits without the class dim", "[ir][errors]") {
  Graph g;
  Value logits = input(g, "logits", {DType::f32, {4, 10}});
  Value labels = input(g, "labels", {DType::i32, {5}});
  CHECK_THROWS_WITH(cross_entropy(logits, labels), Catch::Contains("logits [4,10], labels [5]"));
}
