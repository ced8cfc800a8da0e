// tests/test_dsl.cpp — the user-facing DSL: static shapes, tracing, jit, grad, Var, scopes
#include "dsl/sinter.hpp"

#include "capture_stderr.hpp"

#include <boost/hana/equal.hpp>
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

using namespace sinter;

namespace {

HostTensor f64_tensor(Shape shape, std::vector<double> values) {
  return HostTensor::from_doubles(DType::f64, std::move(shape), values);
}

HostTensor i64_tensor(Shape shape, std::vector<double> values) {
  return HostTensor::from_doubles(DType::i64, std::move(shape), values);
}

/// Deterministic, irregular values (no two equal, no ties in max or argmax).
std::vector<double> ramp(std::size_t n, double scale, double phase) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = scale * std::sin(1.7 * static_cast<double>(i) + phase);
  return v;
}

template <class E> using result_t = typename E::tensor_type;

} // namespace

// Static shapes: every check here is a static_assert, so this compiles only if they hold.
using Images = Tensor<f32, dyn, 784>;
using Weight = Tensor<f32, 784, 100>;
static_assert(
    std::is_same_v<result_t<decltype(matmul(std::declval<Images>(), std::declval<Weight>()))>,
                   Tensor<f32, dyn, 100>>);
static_assert(std::is_same_v<result_t<decltype(matmul(std::declval<Tensor<f32, 8, dyn, 4, 6>>(),
                                                      std::declval<Tensor<f32, 6, 5>>()))>,
                             Tensor<f32, 8, dyn, 4, 5>>);
static_assert(std::is_same_v<result_t<decltype(matmul(std::declval<Tensor<f32, 2, 1, 4, 6>>(),
                                                      std::declval<Tensor<f32, 3, 6, 5>>()))>,
                             Tensor<f32, 2, 3, 4, 5>>);
static_assert(
    std::is_same_v<
        result_t<decltype(std::declval<Tensor<f32, 3, 1>>() + std::declval<Tensor<f32, 4>>())>,
        Tensor<f32, 3, 4>>);
static_assert(
    std::is_same_v<
        result_t<decltype(std::declval<Tensor<f32, dyn, 4>>() * std::declval<Tensor<f32, 7, 1>>())>,
        Tensor<f32, 7, 4>>);
static_assert(
    std::is_same_v<result_t<decltype(sum(std::declval<Tensor<f32, dyn, 3, 5>>(), axes<-1>))>,
                   Tensor<f32, dyn, 3>>);
static_assert(
    std::is_same_v<
        result_t<decltype(mean(std::declval<Tensor<f32, dyn, 3, 5>>(), axes<0, 2>, keepdims))>,
        Tensor<f32, 1, 3, 1>>);
static_assert(
    std::is_same_v<result_t<decltype(logsumexp(std::declval<Tensor<f64, 2, 3>>()))>, Tensor<f64>>);
static_assert(std::is_same_v<result_t<decltype(transpose(std::declval<Tensor<f32, 2, 3, 4>>()))>,
                             Tensor<f32, 2, 4, 3>>);
static_assert(
    std::is_same_v<result_t<decltype(permute<2, 0, 1>(std::declval<Tensor<f32, 2, 3, 4>>()))>,
                   Tensor<f32, 4, 2, 3>>);
static_assert(
    std::is_same_v<result_t<decltype(reshape<dyn, 4>(std::declval<Tensor<f32, dyn, 2, 2>>()))>,
                   Tensor<f32, dyn, 4>>);
static_assert(std::is_same_v<result_t<decltype(cross_entropy(std::declval<Tensor<f32, dyn, 10>>(),
                                                             std::declval<Tensor<i64, dyn>>()))>,
                             Tensor<f32, dyn>>);
static_assert(
    std::is_same_v<result_t<decltype(cross_entropy_mean(std::declval<Tensor<f32, dyn, 10>>(),
                                                        std::declval<Tensor<i32, dyn>>()))>,
                   Tensor<f32>>);
static_assert(std::is_same_v<result_t<decltype(gather(std::declval<Tensor<f32, 50, 16>>(),
                                                      std::declval<Tensor<i32, dyn, 8>>()))>,
                             Tensor<f32, dyn, 8, 16>>);
static_assert(
    std::is_same_v<result_t<decltype(std::declval<Tensor<f32, 3>>() > 0.0)>, Tensor<boolean, 3>>);
static_assert(
    std::is_same_v<result_t<decltype(cast<f64>(std::declval<Tensor<f32, 3>>()))>, Tensor<f64, 3>>);
static_assert(Images::dims == hana::make_tuple(hana::size_c<dyn>, hana::size_c<784>));
static_assert(Images::rank == 2 && Images::dtype == DType::f32);

TEST_CASE("Expressions carry static shapes that agree with the traced runtime shapes", "[dsl]") {
  auto f = jit([](Tensor<f64, dyn, 3> x, Tensor<f64, 3, 2> w) {
    auto y = transpose(matmul(x, w)); // Expr, static type [2, dyn]
    static_assert(std::is_same_v<result_t<decltype(y)>, Tensor<f64, 2, dyn>>);
    Tensor<f64, 2, dyn> materialised = y;
    CHECK(materialised.shape() == Shape{2, 4});
    auto evaluated = eval(y * 2.0);
    static_assert(std::is_same_v<decltype(evaluated), Tensor<f64, 2, dyn>>);
    Var runtime_axes = sum(evaluated, {1}, true);
    CHECK(runtime_axes.shape() == Shape{2, 1});
    return materialised;
  });
  HostTensor out = f(f64_tensor({4, 3}, ramp(12, 1.0, 0.0)), f64_tensor({3, 2}, ramp(6, 1.0, 1.0)));
  CHECK(out.shape() == Shape{2, 4});
}

TEST_CASE("Elementwise operators broadcast numpy-style", "[dsl]") {
  auto f = jit([](Tensor<f64, 2, 1> col, Tensor<f64, 3> row) { return col * 10.0 + row; });
  HostTensor out = f(f64_tensor({2, 1}, {1, 2}), f64_tensor({3}, {1, 2, 3}));
  CHECK(out.shape() == Shape{2, 3});
  CHECK(out.to_doubles() == std::vector<double>{11, 12, 13, 21, 22, 23});
}

TEST_CASE("A dyn dim takes its size from the argument at trace time", "[dsl]") {
  Shape seen;
  auto f = jit([&seen](Tensor<f64, dyn, 2> x) {
    seen = x.shape();
    return sum(x, axes<1>);
  });
  HostTensor out = f(f64_tensor({3, 2}, {1, 2, 3, 4, 5, 6}));
  CHECK(seen == Shape{3, 2});
  CHECK(out.to_doubles() == std::vector<double>{3, 7, 11});
}

TEST_CASE("A runtime mismatch of dyn dims throws a ShapeError naming the op and the shapes",
          "[dsl]") {
  auto f = jit([](Tensor<f64, dyn, 4> a, Tensor<f64, dyn, 4> b) { return a + b; });
  try {
    f(f64_tensor({3, 4}, ramp(12, 1, 0)), f64_tensor({2, 4}, ramp(8, 1, 0)));
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("add"));
    CHECK_THAT(what, Catch::Contains("[3,4]"));
    CHECK_THAT(what, Catch::Contains("[2,4]"));
  }
}

TEST_CASE("Model sizes below 1 are refused when the model is built, naming the size", "[dsl]") {
  Init init(1);
  // A zero width once reached a division by zero (SIGFPE) when the step was traced.
  CHECK_THROWS_WITH(Linear(0, 4, init), Catch::Contains("a parameter of shape [0,4]: every size "
                                                        "must be at least 1"));
  CHECK_THROWS_WITH(Embedding(16, -2, init), Catch::Contains("shape [16,-2]"));
  CHECK_THROWS_WITH(MultiHeadAttention(8, 0, true, init),
                    Catch::Contains("attention needs at least 1 head, got 0"));
  CHECK_THROWS_WITH(
      GPT(GPTConfig{.vocab = 8, .context = 4, .dim = 0, .depth = 1, .heads = 1}, init),
      Catch::Contains("every size must be at least 1"));
  CHECK_NOTHROW(GPT(GPTConfig{.vocab = 8, .context = 4, .dim = 4, .depth = 1, .heads = 2}, init));
}

TEST_CASE("A scope names the model path in shape errors raised inside it", "[dsl]") {
  auto f = jit([](Tensor<f64, dyn, 4> a, Tensor<f64, dyn, 4> b) {
    scope mlp("mlp");
    scope fc1("fc1");
    return a * b;
  });
  try {
    f(f64_tensor({3, 4}, ramp(12, 1, 0)), f64_tensor({2, 4}, ramp(8, 1, 0)));
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("at mlp.fc1"));
  }
  CHECK_THROWS_AS([] { scope outside("nowhere"); }(), std::logic_error);
}

TEST_CASE("Arguments that do not fit a parameter's static type are rejected by name", "[dsl]") {
  auto f = jit([](Tensor<f64, dyn, 3> x, Tensor<f64, 3, 2> w) { return matmul(x, w); },
               {.names = {"x", "w"}});
  try {
    f(f64_tensor({4, 3}, ramp(12, 1, 0)), f64_tensor({3, 3}, ramp(9, 1, 0)));
    FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("'w'"));
    CHECK_THAT(what, Catch::Contains("expects f64[3,2]"));
    CHECK_THAT(what, Catch::Contains("got f64[3,3]"));
  }
  CHECK_THROWS_WITH(f(HostTensor::from_doubles(DType::f32, {4, 3}, ramp(12, 1, 0)),
                      f64_tensor({3, 2}, ramp(6, 1, 0))),
                    Catch::Contains("'x'") && Catch::Contains("dtype f32, expected f64"));
}

TEST_CASE("jit of a small function matches hand-computed values", "[dsl]") {
  auto f = jit([](Tensor<f64, dyn, 3> x, Tensor<f64, 3, 2> w) {
    return sum(relu(matmul(x, w) + 1.0) * 2.0, axes<1>);
  });
  // x @ w = [[4, 5], [-10, -1]]; +1 -> [[5, 6], [-9, 0]]; relu, *2 -> [[10, 12], [0, 0]]
  HostTensor out =
      f(f64_tensor({2, 3}, {1, 2, 3, -4, 5, -6}), f64_tensor({3, 2}, {1, 0, 0, 1, 1, 1}));
  CHECK(out.to_doubles() == std::vector<double>{22, 0});
}

TEST_CASE("Reductions, softmax and log_softmax compute the expected values", "[dsl]") {
  auto f = jit([](Tensor<f64, 2, 3> x) {
    return std::make_tuple(sum(x), mean(x, axes<0>, keepdims), max(x, axes<1>),
                           logsumexp(x, axes<1>), softmax(x), exp(log_softmax(x)),
                           sum(x, std::vector<int64_t>{0}), min(x, axes<0>));
  });
  std::vector<HostTensor> out = f(f64_tensor({2, 3}, {1, 2, 3, 4, 5, 6}));
  REQUIRE(out.size() == 8);
  CHECK(out[0].to_doubles() == std::vector<double>{21});
  CHECK(out[1].shape() == Shape{1, 3});
  CHECK(out[1].to_doubles() == std::vector<double>{2.5, 3.5, 4.5});
  CHECK(out[2].to_doubles() == std::vector<double>{3, 6});
  double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  CHECK(out[3].at(0) == Approx(lse));
  CHECK(out[3].at(1) == Approx(lse + 3));
  for (int64_t i = 0; i < 6; ++i) {
    double expected = std::exp(static_cast<double>(i % 3 + 1) - lse);
    CHECK(out[4].at(i) == Approx(expected));
    CHECK(out[5].at(i) == Approx(expected));
  }
  CHECK(out[6].to_doubles() == std::vector<double>{5, 7, 9});
  CHECK(out[7].to_doubles() == std::vector<double>{1, 2, 3});
}

TEST_CASE("where, comparisons and cast select and convert elements", "[dsl]") {
  auto f = jit([](Tensor<f64, 4> x) {
    auto positive = x > 0.0;
    return std::make_tuple(where(positive, x, -x), cast<i64>(positive),
                           maximum(x, 0.0) - minimum(x, 0.0), pow(abs(x), 2.0));
  });
  std::vector<HostTensor> out = f(f64_tensor({4}, {-2, -0.5, 1, 3}));
  CHECK(out[0].to_doubles() == std::vector<double>{2, 0.5, 1, 3});
  CHECK(out[1].dtype() == DType::i64);
  CHECK(out[1].to_doubles() == std::vector<double>{0, 0, 1, 1});
  CHECK(out[2].to_doubles() == std::vector<double>{2, 0.5, 1, 3});
  CHECK(out[3].to_doubles() == std::vector<double>{4, 0.25, 1, 9});
}

TEST_CASE("where takes a scalar for either branch, in the tensor branch's dtype", "[dsl]") {
  auto f = jit([](Tensor<f64, 4> x, Tensor<f64, 2, 1> rows) {
    auto positive = x > 0.0;
    return std::make_tuple(where(positive, 0.0, x), where(positive, x, 1.0),
                           where(rows > 0.0, x, -7.0), where(Var(positive), Var(x), 2.5));
  });
  std::vector<HostTensor> out = f(f64_tensor({4}, {-2, -0.5, 1, 3}), f64_tensor({2, 1}, {1, -1}));
  CHECK(out[0].to_doubles() == std::vector<double>{-2, -0.5, 0, 0});
  CHECK(out[1].to_doubles() == std::vector<double>{1, 1, 1, 3});
  CHECK(out[2].shape() == Shape{2, 4}); // the condition broadcasts against the tensor branch
  CHECK(out[2].to_doubles() == std::vector<double>{-2, -0.5, 1, 3, -7, -7, -7, -7});
  CHECK(out[3].to_doubles() == std::vector<double>{2.5, 2.5, 1, 3});

  auto i = jit([](Tensor<i64, 3> ids) { return where(ids < 0.0, 0.0, ids); });
  HostTensor clamped = i(i64_tensor({3}, {-100, 4, 2}));
  CHECK(clamped.dtype() == DType::i64);
  CHECK(clamped.to_doubles() == std::vector<double>{0, 4, 2});

  // Gradients flow to the tensor branch where it is picked, and nowhere else.
  auto g = grad([](Tensor<f64, 4> x) { return sum(where(x > 0.0, x * x, -1.0)); });
  Gradients dx = g(f64_tensor({4}, {-2, -0.5, 1, 3}));
  CHECK(dx["arg0"].to_doubles() == std::vector<double>{0, 0, 2, 6});
}

static_assert(std::is_same_v<result_t<decltype(where(std::declval<Tensor<boolean, dyn, 1>>(),
                                                     std::declval<Tensor<f32, 5>>(), 0.0))>,
                             Tensor<f32, dyn, 5>>);
static_assert(std::is_same_v<result_t<decltype(where(std::declval<Tensor<boolean, 3>>(), 1.0,
                                                     std::declval<Tensor<i32, 3>>()))>,
                             Tensor<i32, 3>>);

TEST_CASE("embedding looks up rows of a table by integer ids", "[dsl]") {
  auto f = jit([](Tensor<f64, 4, 2> table, Tensor<i64, dyn> ids) { return embedding(table, ids); });
  HostTensor out =
      f(f64_tensor({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31}), i64_tensor({3}, {2, 0, 2}));
  CHECK(out.shape() == Shape{3, 2});
  CHECK(out.to_doubles() == std::vector<double>{20, 21, 0, 1, 20, 21});
}

TEST_CASE("layernorm normalises the last axis then scales and shifts", "[dsl]") {
  auto f = jit([](Tensor<f64, dyn, 4> x, Tensor<f64, 4> gamma, Tensor<f64, 4> beta) {
    return layernorm(x, gamma, beta, 0.0);
  });
  HostTensor out = f(f64_tensor({1, 4}, {1, 2, 3, 4}), f64_tensor({4}, {1, 1, 2, 2}),
                     f64_tensor({4}, {0, 0, 0, 1}));
  double sd = std::sqrt(1.25);
  std::vector<double> expected{-1.5 / sd, -0.5 / sd, 2 * 0.5 / sd, 2 * 1.5 / sd + 1};
  for (int64_t i = 0; i < 4; ++i)
    CHECK(out.at(i) == Approx(expected[static_cast<size_t>(i)]));
}

namespace {

constexpr std::size_t in_dim = 4, hidden = 5, classes = 3;

using Batch = Tensor<f64, dyn, in_dim>;
using Labels = Tensor<i64, dyn>;
using W1 = Tensor<f64, in_dim, hidden>;
using B1 = Tensor<f64, hidden>;
using W2 = Tensor<f64, hidden, classes>;
using B2 = Tensor<f64, classes>;

auto mlp_loss = [](Batch x, Labels y, W1 w1, B1 b1, W2 w2, B2 b2) {
  Tensor<f64, dyn, hidden> h = tanh(matmul(x, w1) + b1);
  return cross_entropy_mean(matmul(h, w2) + b2, y);
};

struct MlpData {
  std::vector<HostTensor> args;
};

MlpData mlp_data(int64_t batch) {
  std::vector<double> labels;
  for (int64_t i = 0; i < batch; ++i)
    labels.push_back(static_cast<double>((i * 2) % 3));
  return {{f64_tensor({batch, in_dim}, ramp(static_cast<std::size_t>(batch) * in_dim, 1.0, 0.3)),
           i64_tensor({batch}, labels),
           f64_tensor({in_dim, hidden}, ramp(in_dim * hidden, 0.5, 1.1)),
           f64_tensor({hidden}, ramp(hidden, 0.1, 2.0)),
           f64_tensor({hidden, classes}, ramp(hidden * classes, 0.5, 0.7)),
           f64_tensor({classes}, ramp(classes, 0.1, 0.2))}};
}

const std::vector<std::string> mlp_names{"x", "y", "w1", "b1", "w2", "b2"};

} // namespace

TEST_CASE("grad of a two-layer MLP with cross_entropy_mean matches central finite differences",
          "[dsl]") {
  auto step = value_and_grad(mlp_loss, {.names = mlp_names, .wrt = {"w1", "b1", "w2", "b2"}});
  auto loss = jit(mlp_loss);
  MlpData data = mlp_data(6);
  GradResult result = step.call(data.args);
  CHECK(result.value.shape().empty());
  CHECK(result.value.at(0) == Approx(loss.call(data.args).at(0)));
  CHECK(result.grads.size() == 4);

  const double eps = 1e-6;
  for (std::size_t p = 2; p < data.args.size(); ++p) {
    const HostTensor& g = result.grad(mlp_names[p]);
    REQUIRE(g.shape() == data.args[p].shape());
    for (int64_t i = 0; i < g.size(); ++i) {
      std::vector<HostTensor> plus = data.args, minus = data.args;
      plus[p].set(i, plus[p].at(i) + eps);
      minus[p].set(i, minus[p].at(i) - eps);
      double numeric = (loss.call(plus).at(0) - loss.call(minus).at(0)) / (2 * eps);
      INFO(mlp_names[p] << "[" << i << "]");
      CHECK(g.at(i) == Approx(numeric).margin(1e-7));
    }
  }
}

TEST_CASE("grad with no wrt list differentiates every float parameter", "[dsl]") {
  auto grads = grad(mlp_loss, {.names = mlp_names});
  Gradients g = grads.call(mlp_data(3).args);
  CHECK(g.size() == 5); // x, w1, b1, w2, b2; the integer labels are skipped
  CHECK(g["x"].shape() == Shape{3, in_dim});
  CHECK_THROWS_WITH(g["y"], Catch::Contains("no gradient for 'y'"));
}

TEST_CASE("Asking for the gradient with respect to an integer parameter throws", "[dsl]") {
  auto grads = grad(mlp_loss, {.names = mlp_names, .wrt = {"w1", "y"}});
  CHECK_THROWS_AS(grads.call(mlp_data(3).args), std::invalid_argument);
  CHECK_THROWS_WITH(grads.call(mlp_data(3).args),
                    Catch::Contains("'y'") && Catch::Contains("floating-point"));
}

TEST_CASE("Calling with a different batch size retraces and still gives correct results", "[dsl]") {
  auto step = value_and_grad(mlp_loss, {.names = mlp_names, .wrt = {"w2"}});
  GradResult small = step.call(mlp_data(3).args);
  CHECK(step.trace_count() == 1);
  GradResult large = step.call(mlp_data(7).args);
  CHECK(step.trace_count() == 2);
  step.call(mlp_data(3).args);
  CHECK(step.trace_count() == 2);

  // The batch-7 loss equals a fresh trace of the same function at batch 7.
  auto fresh = jit(mlp_loss);
  CHECK(large.value.at(0) == Approx(fresh.call(mlp_data(7).args).at(0)));
  CHECK(small.value.at(0) != Approx(large.value.at(0)));
  CHECK(large.grad("w2").shape() == Shape{hidden, classes});
}

TEST_CASE("A Var carries tensors of different static shapes through a loop over layers", "[dsl]") {
  auto f = jit(
      [](Tensor<f64, dyn, 2> x, Tensor<f64, 2, 3> w1, Tensor<f64, 3, 3> w2, Tensor<f64, 3, 1> w3) {
        std::vector<Var> layers{w1, w2, w3};
        Var h = x;
        for (std::size_t i = 0; i < layers.size(); ++i) {
          scope layer("layer" + std::to_string(i));
          h = relu(matmul(h, layers[i]));
        }
        Tensor<f64, dyn, 1> out = h; // checked narrowing back to a static type
        return out;
      });
  // x = [[1, 2]]; w1 = ones -> [3, 3, 3]; w2 = identity -> same; w3 = [1, -1, 2] -> 6
  HostTensor out =
      f(f64_tensor({1, 2}, {1, 2}), f64_tensor({2, 3}, {1, 1, 1, 1, 1, 1}),
        f64_tensor({3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1}), f64_tensor({3, 1}, {1, -1, 2}));
  CHECK(out.to_doubles() == std::vector<double>{6});
}

TEST_CASE("Narrowing a Var to a Tensor of a different static shape throws a ShapeError", "[dsl]") {
  auto f = jit([](Var x) {
    Tensor<f64, dyn, 5> narrowed = x;
    return narrowed;
  });
  CHECK_THROWS_WITH(f(f64_tensor({2, 3}, ramp(6, 1, 0))),
                    Catch::Contains("Tensor<f64[dyn,5]>") && Catch::Contains("dim 1 is 3"));
}

using sinter::testing::capture_stderr;

TEST_CASE("A recompile is logged with the input, the dim and its old and new size", "[dsl]") {
  auto step = value_and_grad(mlp_loss, {.names = mlp_names, .wrt = {"w2"}});
  std::string first = capture_stderr([&] { step.call(mlp_data(3).args); });
  CHECK_THAT(first, Catch::Contains("sinter: compiled (first call, specialisation 1) in "));
  std::string again = capture_stderr([&] { step.call(mlp_data(3).args); });
  CHECK(again.empty());
  std::string second = capture_stderr([&] { step.call(mlp_data(7).args); });
  CHECK_THAT(second, Catch::Contains("recompiling, input 'x' dim 0 changed 3 -> 7") &&
                         Catch::Contains("specialisation 2"));
}

TEST_CASE("The compiled step reports its peak memory before running", "[dsl]") {
  auto step = value_and_grad(mlp_loss, {.names = mlp_names});
  const CompiledGraph& small = step.compile(mlp_data(3).args);
  const CompiledGraph& large = step.compile(mlp_data(300).args);
  CHECK(small.memory_plan().peak_bytes() > 0);
  CHECK(large.memory_plan().peak_bytes() > small.memory_plan().peak_bytes());
  CHECK(large.memory_plan().arena_bytes() <= large.memory_plan().unshared_bytes());
}

TEST_CASE("argmax picks the first of equal largest elements; accuracy is the share of rows "
          "whose argmax is the label",
          "[dsl]") {
  auto f = jit([](Var logits, Var labels) -> std::tuple<Var, Var, Var> {
    return {argmax(logits), argmax(logits, 0), accuracy(logits, labels)};
  });
  HostTensor logits = HostTensor::from_doubles(
      DType::f32, {3, 4}, std::vector<double>{0, 5, 5, 1, /**/ -1, -2, -3, -4, /**/ 2, 0, 0, 9});
  HostTensor labels = HostTensor::from_doubles(DType::i32, {3}, std::vector<double>{1, 0, 2});
  std::vector<HostTensor> out = f(logits, labels); // rows, columns, share
  REQUIRE(out.size() == 3);
  CHECK(out[0].dtype() == DType::i32);
  CHECK(out[0].to_doubles() == std::vector<double>{1, 0, 3}); // ties: the first
  CHECK(out[1].to_doubles() == std::vector<double>{2, 0, 0, 2});
  CHECK(out[2].at(0) == Approx(2.0 / 3.0));
  auto bad = jit([](Var logits, Var labels) -> Var { return accuracy(logits, labels); });
  HostTensor float_labels = HostTensor::from_doubles(DType::f32, {3}, std::vector<double>{1, 0, 2});
  CHECK_THROWS_WITH(bad(logits, float_labels), Catch::Contains("integer labels"));
}
