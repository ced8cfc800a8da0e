// tests/test_module_gradients.cpp — value_and_grad over a model; compile lines of model programs
#include "dsl/sinter.hpp"

#include "capture_stderr.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace sinter;
using sinter::testing::capture_stderr;

namespace {

HostTensor tensor(DType t, Shape shape, std::vector<double> values) {
  return HostTensor::from_doubles(t, std::move(shape), values);
}

/// loss = mean((x · w - y)^2): its gradient 2/N · xᵀ(x · w - y) is easy to write by hand.
struct Regression {
  BOOST_HANA_DEFINE_STRUCT(Regression, (Parameter, w));
};

auto regression_loss = [](Regression& m, Var x, Var y) {
  Value err = sinter::matmul(x.value(), m.w.node()) - y.value();
  return Var(sinter::mean(err * err));
};

/// The loss and the prediction: value_and_grad hands back the prediction as aux.
auto regression_loss_and_prediction = [](Regression& m, Var x, Var y) {
  Value prediction = sinter::matmul(x.value(), m.w.node());
  Value err = prediction - y.value();
  return std::make_tuple(Var(sinter::mean(err * err)), Var(prediction));
};

/// A module with configuration only.
struct NoParameters {
  BOOST_HANA_DEFINE_STRUCT(NoParameters, (int, unused));
};

std::vector<std::string> parameter_names(auto& model) {
  std::vector<std::string> names;
  for_each_parameter(model, [&](const std::string& n, Parameter&) { names.push_back(n); });
  return names;
}

/// The number in "<n> kernels" of a compile line.
std::size_t kernels_in(const std::string& line) {
  std::size_t at = line.find(" kernels (");
  REQUIRE(at != std::string::npos);
  std::size_t start = line.rfind(' ', at - 1) + 1;
  return std::stoul(line.substr(start, at - start));
}

} // namespace

TEST_CASE("value_and_grad over a model matches the gradient computed by hand", "[training]") {
  Regression model{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  auto loss = value_and_grad(model, regression_loss_and_prediction, {"x", "y"});
  HostTensor x = tensor(DType::f64, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f64, {2, 1}, {1, 0});
  GradResult r = loss(x, y);
  // residuals r0 = 0.5 - 2 - 1 = -2.5, r1 = 1.5 - 4 = -2.5; loss = (r0² + r1²) / 2;
  // gradient = 2/2 · xᵀr = [1·r0 + 3·r1, 2·r0 + 4·r1].
  CHECK(r.value.at(0) == Approx(6.25).epsilon(1e-12));
  REQUIRE(r.grads.size() == 1);
  CHECK(r.grad("w").shape() == Shape{2, 1});
  CHECK(r.grad("w").at(0) == Approx(-10.0).epsilon(1e-12));
  CHECK(r.grad("w").at(1) == Approx(-15.0).epsilon(1e-12));
  REQUIRE(r.aux.size() == 1);
  CHECK(r.aux[0].to_doubles() == std::vector<double>{-1.5, -2.5});
  // value_and_grad only reads the parameters.
  CHECK(model.w.value.to_doubles() == std::vector<double>{0.5, -1.0});
}

TEST_CASE("value_and_grad over a GPT matches finite differences, named like its parameters",
          "[training]") {
  Init init(11);
  GPT gpt(GPTConfig{.vocab = 8, .context = 4, .dim = 8, .depth = 1, .heads = 2}, init);
  // Fixed weights in float64, loaded into the Parameters (finite differences need the precision).
  for_each_parameter(gpt, [](const std::string&, Parameter& p) {
    p.value = HostTensor::from_doubles(DType::f64, p.value.shape(), p.value.to_doubles());
  });
  auto loss_fn = [](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next); };
  auto step = value_and_grad(gpt, loss_fn, {"ids", "next"});
  auto loss = compile_eval(gpt, loss_fn, {"ids", "next"});
  HostTensor ids = tensor(DType::i32, {2, 4}, {1, 5, 2, 7, 0, 3, 3, 6});
  HostTensor next = tensor(DType::i32, {2, 4}, {5, 2, 7, 1, 3, 3, 6, 4});

  GradResult r = step(ids, next);
  CHECK(r.value.at(0) == Approx(loss(ids, next).at(0)).epsilon(1e-12));
  std::vector<std::string> names;
  for (const NamedTensor& g : r.grads)
    names.push_back(g.name);
  CHECK(names == parameter_names(gpt));
  CHECK(r.grad("blocks.0.attn.qkv.weight").shape() == Shape{8, 24});

  const double eps = 1e-6;
  std::size_t checked = 0;
  for_each_parameter(gpt, [&](const std::string& name, Parameter& p) {
    const HostTensor& g = r.grad(name);
    REQUIRE(g.shape() == p.value.shape());
    for (int64_t i = 0; i < p.value.size(); ++i) {
      double original = p.value.at(i);
      p.value.set(i, original + eps);
      double plus = loss(ids, next).at(0);
      p.value.set(i, original - eps);
      double minus = loss(ids, next).at(0);
      p.value.set(i, original);
      INFO(name << "[" << i << "]");
      CHECK(g.at(i) == Approx((plus - minus) / (2 * eps)).margin(1e-7));
      ++checked;
    }
  });
  CHECK(static_cast<int64_t>(checked) == parameter_count(gpt));
  CHECK(step.trace_count() == 1);
  CHECK(loss.trace_count() == 1);
}

TEST_CASE("value_and_grad over a model compiles once per batch shape and reads new weights",
          "[training]") {
  Regression model{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  auto loss = value_and_grad(model, regression_loss, {"x", "y"});
  HostTensor x = tensor(DType::f64, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f64, {2, 1}, {1, 0});
  std::string first = capture_stderr([&] { loss(x, y); });
  CHECK_THAT(first, Catch::StartsWith("sinter: compiled (first call, specialisation 1) in "));
  // Fixed weights assigned to the Parameter are read by the next call, without a recompile.
  model.w.value = tensor(DType::f64, {2, 1}, {0.0, 0.0});
  GradResult zero;
  std::string again = capture_stderr([&] { zero = loss(x, y); });
  CHECK(again.empty());
  CHECK(zero.value.at(0) == Approx(0.5)); // mean(1², 0²)
  CHECK(loss.trace_count() == 1);
  std::string bigger = capture_stderr([&] {
    loss(tensor(DType::f64, {3, 2}, {1, 2, 3, 4, 5, 6}), tensor(DType::f64, {3, 1}, {1, 0, 1}));
  });
  CHECK_THAT(bigger, Catch::Contains("recompiling, input 'x' dim 0 changed 2 -> 3") &&
                         Catch::Contains("specialisation 2"));
  CHECK(loss.trace_count() == 2);
}

TEST_CASE("value_and_grad over a model rejects a non-scalar loss and a model without parameters",
          "[training]") {
  Regression model{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  auto per_row = value_and_grad(
      model, [](Regression& m, Var x) { return Var(sinter::matmul(x.value(), m.w.node())); });
  CHECK_THROWS_WITH(per_row(tensor(DType::f64, {2, 2}, {1, 2, 3, 4})),
                    Catch::Contains("needs a scalar loss") && Catch::Contains("f64[2,1]") &&
                        Catch::Contains("mean(...)"));
  NoParameters empty{};
  CHECK_THROWS_WITH(
      value_and_grad(empty, [](NoParameters&, Var x) { return Var(sinter::sum(x.value())); }),
      Catch::Contains("needs at least one Parameter") &&
          Catch::Contains("BOOST_HANA_DEFINE_STRUCT"));
}

TEST_CASE("compile_step logs one compile line per batch shape, as every compile does",
          "[training]") {
  Regression model{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  auto step = compile_step(model, regression_loss, sgd{.lr = 0.01}, {.batch_names = {"x", "y"}});
  HostTensor x = tensor(DType::f64, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f64, {2, 1}, {1, 0});
  std::string first = capture_stderr([&] { step(x, y); });
  CHECK_THAT(first, Catch::StartsWith("sinter: compiled (first call, specialisation 1) in ") &&
                        Catch::Contains(" kernels (") && Catch::Contains("; peak memory "));
  CHECK(std::count(first.begin(), first.end(), '\n') == 1);
  CHECK(capture_stderr([&] { step(x, y); }).empty());
  std::string second = capture_stderr([&] {
    step(tensor(DType::f64, {3, 2}, {1, 2, 3, 4, 5, 6}), tensor(DType::f64, {3, 1}, {1, 0, 1}));
  });
  CHECK_THAT(second, Catch::StartsWith("sinter: compiled (recompiling, input 'x' dim 0 changed "
                                       "2 -> 3, specialisation 2) in "));
  CHECK(capture_stderr([&] { step(x, y); }).empty()); // back to a shape compiled before
}

TEST_CASE("with accumulation the compile line counts the gradient and the update programs",
          "[training]") {
  Regression model{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  auto step = compile_step(model, regression_loss, adamw{}, {.accumulate = 2});
  HostTensor x = tensor(DType::f64, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f64, {2, 1}, {1, 0});
  std::string line = capture_stderr([&] { step(x, y); });
  CHECK_THAT(line, Catch::StartsWith("sinter: compiled (first call, specialisation 1) in "));
  std::vector<const CompiledGraph*> programs = step.runtime().programs();
  REQUIRE(programs.size() == 2);
  CHECK(kernels_in(line) ==
        programs[0]->compile_report().kernels + programs[1]->compile_report().kernels);
  CHECK(capture_stderr([&] { step(x, y); }).empty());
}

TEST_CASE("compile_step uses the first result of a loss that returns a tuple", "[training]") {
  HostTensor x = tensor(DType::f64, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f64, {2, 1}, {1, 0});
  Regression plain{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  Regression with_aux = plain, accumulated = plain;
  auto a = compile_step(plain, regression_loss, sgd{.lr = 0.01});
  auto b = compile_step(with_aux, regression_loss_and_prediction, sgd{.lr = 0.01});
  auto c =
      compile_step(accumulated, regression_loss_and_prediction, sgd{.lr = 0.01}, {.accumulate = 2});
  double loss = a(x, y).loss.value();
  CHECK(b(x, y).loss.value() == Approx(loss).epsilon(1e-12));
  CHECK(c(x, y).loss.value() == Approx(loss).epsilon(1e-12));
  c(x, y); // the second micro-batch: the update
  REQUIRE(c.steps() == 1);
  for (int64_t i = 0; i < 2; ++i) {
    CHECK(with_aux.w.value.at(i) == Approx(plain.w.value.at(i)).epsilon(1e-12));
    CHECK(accumulated.w.value.at(i) == Approx(plain.w.value.at(i)).epsilon(1e-12));
  }
}

TEST_CASE("compile_eval logs one compile line per batch shape", "[training]") {
  Regression model{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  auto predict = compile_eval(
      model, [](Regression& m, Var x) { return Var(sinter::matmul(x.value(), m.w.node())); },
      {"x"});
  HostTensor x = tensor(DType::f64, {2, 2}, {1, 2, 3, 4});
  std::string first = capture_stderr([&] { predict(x); });
  CHECK_THAT(first, Catch::StartsWith("sinter: compiled (first call, specialisation 1) in "));
  CHECK(capture_stderr([&] { predict(x); }).empty());
  std::string second = capture_stderr([&] { predict(tensor(DType::f64, {1, 2}, {1, 1})); });
  CHECK_THAT(second, Catch::Contains("recompiling, input 'x' dim 0 changed 2 -> 1") &&
                         Catch::Contains("specialisation 2"));
  CHECK(predict.trace_count() == 2);
}
