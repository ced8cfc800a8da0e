// tests/test_training.cpp — modules, compile_step (optimizers, clipping, accumulation), eval
#include "dsl/sinter.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

using namespace sinter;

namespace {

HostTensor tensor(DType t, Shape shape, std::vector<double> values) {
  return HostTensor::from_doubles(t, std::move(shape), values);
}

/// 8 samples of 4 features in 3 classes, fixed.
std::pair<HostTensor, HostTensor> toy_batch() {
  std::vector<double> x;
  for (int i = 0; i < 32; ++i)
    x.push_back(std::sin(0.7 * i) + 0.1 * (i % 4));
  return {tensor(DType::f32, {8, 4}, x), tensor(DType::i32, {8}, {0, 1, 2, 0, 1, 2, 0, 1})};
}

/// A single weight vector: loss = mean((x · w - y)^2), easy to check by hand.
struct Regression {
  BOOST_HANA_DEFINE_STRUCT(Regression, (Parameter, w));
};

auto regression_loss = [](Regression& m, Var x, Var y) {
  Value err = sinter::matmul(x.value(), m.w.node()) - y.value();
  return Var(sinter::mean(err * err));
};

/// A 4-sample regression batch: x [4, 2], y [4, 1].
std::pair<HostTensor, HostTensor> four_samples() {
  return {tensor(DType::f64, {4, 2}, {1, 2, 3, 4, -1, 0.5, 2, -2}),
          tensor(DType::f64, {4, 1}, {1, 0, 2, -1})};
}

/// Sample `i` of a [N, 2] / [N, 1] regression batch as a one-sample micro-batch of `step`.
template <class Step>
void feed_sample(Step& step, const HostTensor& x, const HostTensor& y, int i) {
  step(tensor(DType::f64, {1, 2}, {x.at(2 * i), x.at(2 * i + 1)}),
       tensor(DType::f64, {1, 1}, {y.at(i)}));
}

void check_same_weights(const Regression& got, const Regression& want) {
  CHECK(got.w.value.at(0) == Approx(want.w.value.at(0)).epsilon(1e-12));
  CHECK(got.w.value.at(1) == Approx(want.w.value.at(1)).epsilon(1e-12));
}

} // namespace

TEST_CASE("a tiny MLP trains to near-zero loss on a fixed batch", "[training]") {
  Init init(1);
  MLP model({4, 32, 3}, init);
  auto step =
      compile_step(model, [](MLP& m, Var x, Var y) { return cross_entropy_mean(m(x), y); },
                   adamw{.lr = 0.02, .weight_decay = 0.0}, {.batch_names = {"x", "labels"}});
  auto [x, y] = toy_batch();
  double first = step(x, y).loss.value(), last = first;
  for (int i = 0; i < 300; ++i)
    last = step(x, y).loss.value();
  CHECK(first > 0.9);
  CHECK(last < 0.02);
  CHECK(step.steps() == 301);
  CHECK(step.runtime().compilations() == 1);
}

TEST_CASE("an interrupt makes the next step throw Interrupted and change nothing; the step "
          "then goes on",
          "[training]") {
  Regression model{Parameter(tensor(DType::f64, {2, 1}, {0.5, -0.5}))};
  auto step = compile_step(model, regression_loss, sgd{.lr = 0.1});
  auto [x, y] = four_samples();
  step(x, y);
  step(x, y);
  const std::vector<double> before = model.w.value.to_doubles();
  request_interrupt();
  CHECK_THROWS_AS(step(x, y), Interrupted);
  CHECK(step.steps() == 2);
  CHECK(model.w.value.to_doubles() == before);
  step(x, y); // taken once: the next call runs
  CHECK(step.steps() == 3);
  CHECK(model.w.value.to_doubles() != before);
  request_interrupt();
  clear_interrupt();
  step(x, y); // a cleared request stops nothing
  CHECK(step.steps() == 4);
}

TEST_CASE("SGD with momentum matches the update computed by hand", "[training]") {
  Regression model{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  auto step = compile_step(model, regression_loss, sgd{.lr = 0.1, .momentum = 0.9});
  HostTensor x = tensor(DType::f64, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f64, {2, 1}, {1, 0});
  // Hand computation: g = 2/N Xᵀ(Xw - y); b = 0.9 b + g; w -= 0.1 b.
  std::vector<double> w{0.5, -1.0}, b{0, 0};
  for (int s = 0; s < 3; ++s) {
    double r0 = 1 * w[0] + 2 * w[1] - 1, r1 = 3 * w[0] + 4 * w[1] - 0;
    double g0 = (1 * r0 + 3 * r1), g1 = (2 * r0 + 4 * r1); // 2/N with N = 2
    b = {0.9 * b[0] + g0, 0.9 * b[1] + g1};
    w = {w[0] - 0.1 * b[0], w[1] - 0.1 * b[1]};
    step(x, y);
  }
  CHECK(model.w.value.at(0) == Approx(w[0]).epsilon(1e-12));
  CHECK(model.w.value.at(1) == Approx(w[1]).epsilon(1e-12));
}

TEST_CASE("AdamW matches the reference update, decoupled weight decay included", "[training]") {
  Regression model{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  adamw opt{.lr = 0.05, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.1};
  auto step = compile_step(model, regression_loss, opt);
  HostTensor x = tensor(DType::f64, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f64, {2, 1}, {1, 0});
  std::vector<double> w{0.5, -1.0}, m{0, 0}, v{0, 0};
  for (int t = 1; t <= 3; ++t) {
    double r0 = w[0] + 2 * w[1] - 1, r1 = 3 * w[0] + 4 * w[1];
    double g[2] = {r0 + 3 * r1, 2 * r0 + 4 * r1};
    for (int i = 0; i < 2; ++i) {
      m[i] = 0.8 * m[i] + 0.2 * g[i];
      v[i] = 0.9 * v[i] + 0.1 * g[i] * g[i];
      double mh = m[i] / (1 - std::pow(0.8, t)), vh = v[i] / (1 - std::pow(0.9, t));
      w[i] = w[i] - 0.05 * 0.1 * w[i] - 0.05 * mh / (std::sqrt(vh) + 1e-6);
    }
    step(x, y);
  }
  CHECK(model.w.value.at(0) == Approx(w[0]).epsilon(1e-9));
  CHECK(model.w.value.at(1) == Approx(w[1]).epsilon(1e-9));
}

TEST_CASE("accumulating four micro-batches equals one step on the whole batch", "[training]") {
  auto [x, y] = four_samples();
  Regression whole{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  Regression parts = whole;
  auto full = compile_step(whole, regression_loss, sgd{.lr = 0.05});
  auto micro = compile_step(parts, regression_loss, sgd{.lr = 0.05}, {.accumulate = 4});
  full(x, y);
  for (int i = 0; i < 4; ++i) {
    CHECK(micro.steps() == 0);
    feed_sample(micro, x, y, i);
  }
  CHECK(micro.steps() == 1);
  check_same_weights(parts, whole);
}

TEST_CASE("accumulation starts every update from zero gradient sums", "[training]") {
  // Three cycles of four one-sample micro-batches must equal three whole-batch steps: a sum
  // left over from the previous cycle would add its gradients to the next update.
  auto [x, y] = four_samples();
  Regression whole{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  Regression parts = whole;
  auto full = compile_step(whole, regression_loss, sgd{.lr = 0.05});
  auto micro = compile_step(parts, regression_loss, sgd{.lr = 0.05}, {.accumulate = 4});
  for (int update = 1; update <= 3; ++update) {
    full(x, y);
    for (int i = 0; i < 4; ++i)
      feed_sample(micro, x, y, i);
    INFO("after update " << update);
    CHECK(micro.steps() == update);
    check_same_weights(parts, whole);
  }
}

TEST_CASE("gradient clipping bounds the global norm of the update", "[training]") {
  Regression model{Parameter(tensor(DType::f64, {2, 1}, {5.0, -5.0}))};
  auto step = compile_step(model, regression_loss, sgd{.lr = 1.0}, {.clip_grad_norm = 0.5});
  HostTensor x = tensor(DType::f64, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f64, {2, 1}, {1, 0});
  step(x, y);
  double d0 = model.w.value.at(0) - 5.0, d1 = model.w.value.at(1) + 5.0;
  CHECK(std::sqrt(d0 * d0 + d1 * d1) == Approx(0.5).epsilon(1e-5));
}

namespace {

/// Two weight vectors with loss ½ k (|a|² + |b|²), k a batch scalar: with k = 1 each gradient
/// equals its vector.
struct TwoVectors {
  BOOST_HANA_DEFINE_STRUCT(TwoVectors, (Parameter, a), (Parameter, b));
};

auto half_squared_norms = [](TwoVectors& m, Var k) {
  Value a = m.a.node(), b = m.b.node();
  return Var(0.5 * k.value() * (sinter::sum(a * a) + sinter::sum(b * b)));
};

} // namespace

TEST_CASE("gradient clipping scales every gradient by the one global-norm factor", "[training]") {
  // |a| = 3 and |b| = 4: global norm 5. Clipping to 2.5 halves both gradients; clipping each
  // tensor to 2.5 on its own would scale a by 2.5/3 and b by 2.5/4 instead.
  TwoVectors model{Parameter(tensor(DType::f64, {2}, {1.8, -2.4})),
                   Parameter(tensor(DType::f64, {1}, {4.0}))};
  auto step = compile_step(model, half_squared_norms, sgd{.lr = 1.0}, {.clip_grad_norm = 2.5});
  step(tensor(DType::f64, {}, {1.0})); // k = 1
  // Hand computation: scale = max_norm / global norm = 2.5 / 5. Tolerance 1e-5: the step sums
  // the squares in f32 and adds 1e-6 to the norm.
  double scale = 2.5 / std::sqrt(1.8 * 1.8 + 2.4 * 2.4 + 4.0 * 4.0);
  CHECK(model.a.value.at(0) == Approx(1.8 - scale * 1.8).epsilon(1e-5));
  CHECK(model.a.value.at(1) == Approx(-2.4 + scale * 2.4).epsilon(1e-5));
  CHECK(model.b.value.at(0) == Approx(4.0 - scale * 4.0).epsilon(1e-5));
}

TEST_CASE("gradients whose global norm is under the clipping limit are left unchanged",
          "[training]") {
  // Global norm 5 < 10: the update is the plain SGD one, w -= 0.5 w.
  TwoVectors model{Parameter(tensor(DType::f64, {2}, {1.8, -2.4})),
                   Parameter(tensor(DType::f64, {1}, {4.0}))};
  auto step = compile_step(model, half_squared_norms, sgd{.lr = 0.5}, {.clip_grad_norm = 10.0});
  step(tensor(DType::f64, {}, {1.0})); // k = 1
  CHECK(model.a.value.at(0) == Approx(0.9).epsilon(1e-12));
  CHECK(model.a.value.at(1) == Approx(-1.2).epsilon(1e-12));
  CHECK(model.b.value.at(0) == Approx(2.0).epsilon(1e-12));
}

TEST_CASE("a learning-rate schedule changes the rate without recompiling", "[training]") {
  Init init(2);
  MLP model({4, 8, 3}, init);
  auto step = compile_step(model, [](MLP& m, Var x, Var y) { return cross_entropy_mean(m(x), y); },
                           adamw{}, {.schedule = warmup_cosine(0.01, 2, 6)});
  auto [x, y] = toy_batch();
  std::vector<double> rates;
  for (int i = 0; i < 6; ++i)
    rates.push_back(step(x, y).lr);
  CHECK(rates[0] == Approx(0.005));
  CHECK(rates[1] == Approx(0.01));
  CHECK(rates[5] < rates[2]);
  CHECK(step.runtime().compilations() == 1);
}

TEST_CASE("the update applies the learning rate the schedule gives for each step", "[training]") {
  // warmup_cosine(0.02, 2, 5): warm-up 0.01, 0.02, then cosine over three steps 0.02, 0.015,
  // 0.005. The schedule replaces sgd's own lr.
  const double rates[] = {0.01, 0.02, 0.02, 0.015, 0.005};
  Regression model{Parameter(tensor(DType::f64, {2, 1}, {0.5, -1.0}))};
  auto step =
      compile_step(model, regression_loss, sgd{.lr = 1.0}, {.schedule = warmup_cosine(0.02, 2, 5)});
  HostTensor x = tensor(DType::f64, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f64, {2, 1}, {1, 0});
  // Hand computation: g = 2/N Xᵀ(Xw - y); w -= rate[s] g.
  std::vector<double> w{0.5, -1.0};
  for (int s = 0; s < 5; ++s) {
    double r0 = 1 * w[0] + 2 * w[1] - 1, r1 = 3 * w[0] + 4 * w[1] - 0;
    double g0 = 1 * r0 + 3 * r1, g1 = 2 * r0 + 4 * r1; // 2/N with N = 2
    w = {w[0] - rates[s] * g0, w[1] - rates[s] * g1};
    StepOutput out = step(x, y);
    INFO("step " << s);
    CHECK(out.lr == Approx(rates[s]).epsilon(1e-12));
    CHECK(model.w.value.at(0) == Approx(w[0]).epsilon(1e-12));
    CHECK(model.w.value.at(1) == Approx(w[1]).epsilon(1e-12));
  }
}

TEST_CASE("parameters have stable dotted names and counts", "[training]") {
  Init init(3);
  GPT gpt(GPTConfig{.vocab = 32, .context = 8, .dim = 16, .depth = 2, .heads = 2}, init);
  std::vector<std::string> names;
  for_each_parameter(gpt, [&](const std::string& n, Parameter&) { names.push_back(n); });
  CHECK(names.front() == "tokens.weight");
  CHECK(std::find(names.begin(), names.end(), "blocks.1.attn.qkv.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "blocks.0.mlp.layers.1.bias") != names.end());
  int64_t d = 16, per_block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) +
                              (4 * d * d + d);
  CHECK(parameter_count(gpt) == 32 * d + 8 * d + 2 * per_block + 2 * d + (d * 32 + 32));
}

TEST_CASE("a GPT's logits at a position ignore later tokens", "[training]") {
  Init init(4);
  GPT gpt(GPTConfig{.vocab = 32, .context = 8, .dim = 16, .depth = 2, .heads = 2}, init);
  auto logits = compile_eval(gpt, [](GPT& m, Var ids) { return m(ids); });
  HostTensor a = tensor(DType::i32, {1, 6}, {1, 2, 3, 4, 5, 6});
  HostTensor b = tensor(DType::i32, {1, 6}, {1, 2, 3, 9, 9, 9});
  HostTensor la = logits(a), lb = logits(b);
  REQUIRE(la.shape() == Shape{1, 6, 32});
  for (int i = 0; i < 3 * 32; ++i)
    CHECK(la.at(i) == Approx(lb.at(i)).epsilon(1e-5));
  CHECK(la.at(3 * 32) != Approx(lb.at(3 * 32)));
}

TEST_CASE("a ViT maps images to class logits and trains", "[training]") {
  Init init(5);
  ViT vit(ViTConfig{.image = 8, .patch = 4, .dim = 16, .depth = 1, .heads = 2, .classes = 3}, init);
  std::vector<double> pixels;
  for (int i = 0; i < 4 * 64; ++i)
    pixels.push_back(std::cos(0.3 * i));
  HostTensor images = tensor(DType::f32, {4, 8, 8}, pixels),
             labels = tensor(DType::i32, {4}, {0, 1, 2, 1});
  auto step = compile_step(
      vit, [](ViT& m, Var x, Var y) { return cross_entropy_mean(m(x), y); }, adamw{.lr = 0.01});
  double first = step(images, labels).loss.value(), last = first;
  for (int i = 0; i < 60; ++i)
    last = step(images, labels).loss.value();
  CHECK(last < 0.5 * first);
  auto eval = compile_eval(vit, [](ViT& m, Var x) { return m(x); });
  CHECK(eval(images).shape() == Shape{4, 3});
}

namespace {

struct BlobRun {
  MLP model;
  std::vector<double> flat_weights() {
    std::vector<double> out;
    for_each_parameter(model, [&](const std::string&, Parameter& p) {
      auto v = p.value.to_doubles();
      out.insert(out.end(), v.begin(), v.end());
    });
    return out;
  }
};

auto blob_loss = [](MLP& m, Var x, Var y) { return cross_entropy_mean(m(x), y); };

} // namespace

TEST_CASE("resuming from a checkpoint continues bit for bit like an uninterrupted run",
          "[training][checkpoint]") {
  auto blobs = data::gaussian_blobs(256, 6, 3, 7);
  data::LoaderOptions opts{.batch_size = 32, .shuffle = true, .seed = 11, .prefetch_threads = 2};
  sinter::testing::TempDir dir("sinter-resume");
  auto file = dir.path / "step.safetensors";

  // Uninterrupted: 20 steps.
  Init init_a(3);
  MLP a({6, 16, 3}, init_a);
  auto step_a = compile_step(a, blob_loss, adamw{.lr = 0.01});
  data::DataLoader loader_a(*blobs, opts);
  data::Batch b;
  for (int i = 0; i < 20; ++i) {
    if (!loader_a.next(b)) {
      loader_a.start_epoch(loader_a.position().epoch + 1);
      loader_a.next(b);
    }
    step_a(b.examples, b.labels);
  }

  // Interrupted after 13 steps, saved, then resumed in fresh objects for the remaining 7.
  {
    Init init_b(3);
    MLP b_model({6, 16, 3}, init_b);
    auto step_b = compile_step(b_model, blob_loss, adamw{.lr = 0.01});
    data::DataLoader loader_b(*blobs, opts);
    for (int i = 0; i < 13; ++i) {
      if (!loader_b.next(b)) {
        loader_b.start_epoch(loader_b.position().epoch + 1);
        loader_b.next(b);
      }
      step_b(b.examples, b.labels);
    }
    save_checkpoint(file, b_model, step_b,
                    {{"epoch", std::to_string(loader_b.position().epoch)},
                     {"batch", std::to_string(loader_b.position().batch)}});
  }
  Init init_c(99); // different initial weights: everything must come from the checkpoint
  MLP c({6, 16, 3}, init_c);
  auto step_c = compile_step(c, blob_loss, adamw{.lr = 0.01});
  auto meta = load_checkpoint(file, c, step_c);
  CHECK(step_c.steps() == 13);
  data::DataLoader loader_c(*blobs, opts);
  loader_c.seek({std::stoll(meta.at("epoch")), std::stoll(meta.at("batch"))});
  for (int i = 13; i < 20; ++i) {
    if (!loader_c.next(b)) {
      loader_c.start_epoch(loader_c.position().epoch + 1);
      loader_c.next(b);
    }
    step_c(b.examples, b.labels);
  }
  BlobRun ra{a}, rc{c};
  CHECK(ra.flat_weights() == rc.flat_weights());
}

TEST_CASE("a checkpoint for another model is rejected by name", "[training][checkpoint]") {
  sinter::testing::TempDir temp("sinter-mismatch");
  const auto& dir = temp.path;
  Init init(1);
  MLP small({4, 8, 3}, init), wide({4, 16, 3}, init);
  auto step_small = compile_step(small, blob_loss, sgd{});
  auto step_wide = compile_step(wide, blob_loss, sgd{});
  save_checkpoint(dir / "c.safetensors", small, step_small);
  CHECK_THROWS_WITH(
      load_checkpoint(dir / "c.safetensors", wide, step_wide),
      Catch::Contains("'model.layers.0.weight' is f32[4,8], the model expects f32[4,16]"));
}

TEST_CASE("a checkpoint whose step is not a whole integer in range is refused, changing nothing",
          "[training][checkpoint]") {
  sinter::testing::TempDir temp("sinter-bad-step");
  std::filesystem::path file = temp.path / "c.safetensors";
  Init init(1), other(2);
  MLP saved({4, 8, 3}, init), model({4, 8, 3}, other);
  auto step_saved = compile_step(saved, blob_loss, sgd{});
  auto step = compile_step(model, blob_loss, sgd{});
  save_checkpoint(file, saved, step_saved);
  Checkpoint written = load_safetensors(file);
  std::vector<std::pair<std::string, const HostTensor*>> tensors;
  for (const auto& [name, tensor] : written.tensors)
    tensors.emplace_back(name, &tensor);
  HostTensor before = model.layers[0].weight.value;
  // Once `-5` resumed at step -5 (then trained on NaN), `3abc` at 3 and `1e3` at 1.
  for (std::string bad : {"-5", "3abc", "1e3", "", " 7", "99999999999999999999"}) {
    std::map<std::string, std::string> metadata = written.metadata;
    metadata["step"] = bad;
    save_safetensors(file, tensors, metadata);
    INFO("step '" << bad << "'");
    CHECK_THROWS_WITH(load_checkpoint(file, model, step),
                      Catch::Contains("metadata 'step' is '" + bad + "', not an integer from 0"));
  }
  std::map<std::string, std::string> metadata = written.metadata;
  metadata.erase("step");
  save_safetensors(file, tensors, metadata);
  CHECK_THROWS_WITH(load_checkpoint(file, model, step), Catch::Contains("has no 'step' metadata"));
  CHECK(step.steps() == 0);
  CHECK(std::equal(before.bytes().begin(), before.bytes().end(),
                   model.layers[0].weight.value.bytes().begin()));
}

TEST_CASE("a checkpoint or weights file holding inf or NaN, or a negative second moment, is "
          "refused by tensor name, changing nothing",
          "[training][checkpoint]") {
  sinter::testing::TempDir temp("sinter-nonfinite");
  std::filesystem::path file = temp.path / "c.safetensors";
  Init init(1), other(2);
  MLP saved({4, 8, 3}, init), model({4, 8, 3}, other);
  auto step_saved = compile_step(saved, blob_loss, adamw{.lr = 0.01});
  auto [x, y] = toy_batch();
  step_saved(x, y);
  auto step = compile_step(model, blob_loss, adamw{.lr = 0.01});
  save_checkpoint(file, saved, step_saved);
  const Checkpoint written = load_safetensors(file);
  HostTensor before = model.layers[1].weight.value;
  // Once these trained on and printed `train_loss=nan` with exit 0.
  auto edited = [&](const std::string& tensor, int64_t element, double value) {
    Checkpoint copy = written;
    copy.tensors.at(tensor).set(element, value);
    std::vector<std::pair<std::string, const HostTensor*>> tensors;
    for (const auto& [name, t] : copy.tensors)
      tensors.emplace_back(name, &t);
    save_safetensors(file, tensors, copy.metadata);
  };
  edited("model.layers.1.bias", 2, std::nan(""));
  CHECK_THROWS_WITH(load_checkpoint(file, model, step),
                    Catch::Contains("tensor 'model.layers.1.bias' holds nan at element 2"));
  CHECK_THROWS_WITH(load_weights(file, model),
                    Catch::Contains("'model.layers.1.bias' holds nan at element 2"));
  edited("model.layers.0.weight", 5, -INFINITY);
  CHECK_THROWS_WITH(load_checkpoint(file, model, step), Catch::Contains("holds -inf at element 5"));
  edited("optimizer.v.layers.0.bias", 1, -0.5);
  CHECK_THROWS_WITH(load_checkpoint(file, model, step),
                    Catch::Contains("'optimizer.v.layers.0.bias' holds -0.5") &&
                        Catch::Contains("only values of 0 or more"));
  edited("optimizer.m.layers.0.bias", 1, -0.5); // a first moment may be negative
  load_checkpoint(file, model, step);
  CHECK(step.steps() == 1);
  CHECK(model.layers[1].weight.value.at(0) == saved.layers[1].weight.value.at(0));
  CHECK(before.at(0) != saved.layers[1].weight.value.at(0));
}

TEST_CASE("compile_eval returns a scalar loss with its own storage", "[training]") {
  Init init(6);
  MLP model({4, 8, 3}, init);
  auto loss = compile_eval(model, [](MLP& m, Var x, Var y) { return cross_entropy_mean(m(x), y); });
  auto [x, y] = toy_batch();
  HostTensor l = loss(x, y);
  CHECK(l.shape().empty());
  CHECK(l.bytes().size() == 4);
  CHECK(l.at(0) > 0.5);
}

TEST_CASE("dropout is reproducible for a key and differs between keys", "[training]") {
  Init init(7);
  MLP model({4, 64, 3}, init);
  Dropout drop{.p = 0.5};
  auto loss = compile_eval(model, [&drop](MLP& m, Var x, Var y, Var key) {
    return cross_entropy_mean(drop(m(x), key), y);
  });
  auto [x, y] = toy_batch();
  auto key = [](double k) { return tensor(DType::i64, {}, {k}); };
  double a = loss(x, y, key(1)).at(0), again = loss(x, y, key(1)).at(0),
         b = loss(x, y, key(2)).at(0);
  CHECK(a == again);
  CHECK(a != b);
  // About half the logits survive, scaled by 2: the mean is preserved in expectation.
  auto kept = compile_eval(model, [&drop](MLP& m, Var x, Var key) {
    return Var(
        sum(cast(not_equal(drop(m(x), key).value(), scalar_like(m(x).value(), 0.0)), DType::f32)));
  });
  double fraction = kept(x, key(3)).at(0) / 24.0;
  CHECK(fraction > 0.25);
  CHECK(fraction < 0.75);
}

TEST_CASE("cross-entropy supports label smoothing, ignore_index and per-sample losses",
          "[training][losses]") {
  HostTensor logits = tensor(DType::f64, {3, 3}, {1, 2, 3, 0, 0, 0, 2, -1, 0.5});
  HostTensor labels = tensor(DType::i32, {3}, {2, -100, 0});
  auto per_sample = jit([](Tensor<f64, dyn, 3> z, Tensor<i32, dyn> y) {
    return cross_entropy_loss(z, y, {.label_smoothing = 0.1}, Reduction::none);
  });
  auto mean_loss = jit([](Tensor<f64, dyn, 3> z, Tensor<i32, dyn> y) {
    return cross_entropy_loss(z, y, {.label_smoothing = 0.1});
  });
  // By hand: lse - (0.9 * z[label] + 0.1 * mean(z)).
  auto lse = [](double a, double b, double c) {
    return std::log(std::exp(a) + std::exp(b) + std::exp(c));
  };
  double s0 = lse(1, 2, 3) - (0.9 * 3 + 0.1 * 2.0);
  double s2 = lse(2, -1, 0.5) - (0.9 * 2 + 0.1 * (1.5 / 3));
  HostTensor p = per_sample(logits, labels);
  CHECK(p.at(0) == Approx(s0).epsilon(1e-12));
  CHECK(p.at(1) == 0.0); // ignored
  CHECK(p.at(2) == Approx(s2).epsilon(1e-12));
  CHECK(mean_loss(logits, labels).at(0) == Approx((s0 + s2) / 2).epsilon(1e-12));
}

TEST_CASE("mean squared error has per-sample and mean forms", "[training][losses]") {
  HostTensor pred = tensor(DType::f64, {2, 2}, {1, 2, 3, 4}),
             target = tensor(DType::f64, {2, 2}, {1, 0, 0, 4});
  auto per = jit([](Var p, Var t) { return mse_loss(p, t, Reduction::none); });
  auto all = jit([](Var p, Var t) { return mse_loss(p, t); });
  HostTensor s = per(pred, target);
  CHECK(s.shape() == Shape{2});
  CHECK(s.at(0) == Approx(2.0));
  CHECK(s.at(1) == Approx(4.5));
  CHECK(all(pred, target).at(0) == Approx(3.25));
}

TEST_CASE("a model trains with label smoothing through compile_step", "[training][losses]") {
  Init init(8);
  MLP model({4, 16, 3}, init);
  auto step = compile_step(
      model,
      [](MLP& m, Var x, Var y) { return cross_entropy_loss(m(x), y, {.label_smoothing = 0.1}); },
      adamw{.lr = 0.02, .weight_decay = 0.0});
  auto [x, y] = toy_batch();
  double first = step(x, y).loss.value(), last = first;
  for (int i = 0; i < 200; ++i)
    last = step(x, y).loss.value();
  CHECK(last < 0.5 * first);
  CHECK(last > 0.1); // smoothing keeps the loss away from zero
}

TEST_CASE("kd_loss is alpha·T²·KL(teacher ‖ student) + (1 − alpha)·CE, with no gradient into the "
          "teacher",
          "[training][losses]") {
  HostTensor s = tensor(DType::f64, {2, 3}, {1, 2, 0.5, -1, 0, 2});
  HostTensor t = tensor(DType::f64, {2, 3}, {2, 1, 0, 0, 0, 3});
  HostTensor y = tensor(DType::i32, {2}, {0, 2});
  const KdOptions options{.temperature = 2.0, .alpha = 0.3};
  const double T = 2.0, alpha = 0.3;
  auto softmax_row = [](std::vector<double> z, double scale) {
    double total = 0;
    for (double& v : z)
      total += (v = std::exp(v / scale));
    for (double& v : z)
      v /= total;
    return z;
  };
  std::vector<double> by_hand, expected_ds;
  for (int64_t i = 0; i < 2; ++i) {
    std::vector<double> si{s.at(3 * i), s.at(3 * i + 1), s.at(3 * i + 2)};
    std::vector<double> ti{t.at(3 * i), t.at(3 * i + 1), t.at(3 * i + 2)};
    std::vector<double> ps = softmax_row(si, T), pt = softmax_row(ti, T), p1 = softmax_row(si, 1);
    double kl = 0;
    for (int c = 0; c < 3; ++c)
      kl += pt[c] * (std::log(pt[c]) - std::log(ps[c]));
    auto label = static_cast<int>(y.at(i));
    by_hand.push_back(alpha * T * T * kl + (1 - alpha) * -std::log(p1[label]));
    // d/ds: alpha·T·(ps − pt) + (1 − alpha)·(softmax(s) − onehot), over the batch mean.
    for (int c = 0; c < 3; ++c)
      expected_ds.push_back(
          (alpha * T * (ps[c] - pt[c]) + (1 - alpha) * (p1[c] - (c == label ? 1.0 : 0.0))) / 2.0);
  }
  auto per_sample =
      jit([options](Var a, Var b, Var l) { return kd_loss(a, b, l, options, Reduction::none); });
  HostTensor per = per_sample(s, t, y);
  REQUIRE(per.shape() == Shape{2});
  CHECK(per.at(0) == Approx(by_hand[0]).epsilon(1e-12));
  CHECK(per.at(1) == Approx(by_hand[1]).epsilon(1e-12));
  auto mean_loss = jit([options](Var a, Var b, Var l) { return kd_loss(a, b, l, options); });
  CHECK(mean_loss(s, t, y).at(0) == Approx((by_hand[0] + by_hand[1]) / 2).epsilon(1e-12));

  auto gradients = grad([options](Var a, Var b, Var l) { return kd_loss(a, b, l, options); });
  Gradients g = gradients(s, t, y);
  for (int64_t k = 0; k < 6; ++k) {
    CHECK(g["arg0"].at(k) == Approx(expected_ds[static_cast<std::size_t>(k)]).margin(1e-12));
    CHECK(g["arg1"].at(k) == 0.0); // the teacher is frozen
  }
  // alpha = 1: distillation alone; the labels do not matter.
  auto soft_only =
      jit([](Var a, Var b, Var l) { return kd_loss(a, b, l, {.temperature = 2.0, .alpha = 1.0}); });
  HostTensor other_labels = tensor(DType::i32, {2}, {1, 1});
  CHECK(soft_only(s, t, y).at(0) == soft_only(s, t, other_labels).at(0));

  // Bad input is named.
  auto wide = tensor(DType::f64, {2, 4}, {0, 0, 0, 0, 0, 0, 0, 0});
  CHECK_THROWS_WITH(mean_loss(s, wide, y), Catch::Contains("one shape") &&
                                               Catch::Contains("f64[2,3]") &&
                                               Catch::Contains("f64[2,4]"));
  auto cold = jit([](Var a, Var b, Var l) { return kd_loss(a, b, l, {.temperature = 0.0}); });
  CHECK_THROWS_WITH(cold(s, t, y), Catch::Contains("temperature"));
  auto over = jit([](Var a, Var b, Var l) { return kd_loss(a, b, l, {.alpha = 1.5}); });
  CHECK_THROWS_WITH(over(s, t, y), Catch::Contains("alpha must be in [0, 1]"));
}

TEST_CASE("feature distillation is the MSE to the teacher's hidden state, frozen",
          "[training][losses]") {
  HostTensor student = tensor(DType::f64, {2, 2}, {1, 2, 3, 4}),
             teacher = tensor(DType::f64, {2, 2}, {1, 0, 0, 4});
  auto loss = jit([](Var a, Var b) { return feature_distillation_loss(a, b); });
  CHECK(loss(student, teacher).at(0) == Approx(3.25));
  auto per = jit([](Var a, Var b) { return feature_distillation_loss(a, b, Reduction::none); });
  CHECK(per(student, teacher).at(1) == Approx(4.5));
  Gradients g =
      grad([](Var a, Var b) { return feature_distillation_loss(a, b); })(student, teacher);
  CHECK(g["arg0"].to_doubles() == std::vector<double>{0.0, 1.0, 1.5, 0.0}); // 2·diff / 4
  CHECK(g["arg1"].to_doubles() == std::vector<double>{0.0, 0.0, 0.0, 0.0});
  HostTensor narrow = tensor(DType::f64, {2, 3}, {0, 0, 0, 0, 0, 0});
  CHECK_THROWS_WITH(loss(student, narrow), Catch::Contains("Linear"));
}

TEST_CASE("parameter groups: GPT-2's rule trains biases, norms and embeddings without weight "
          "decay, and an lr scale of 0 freezes a group",
          "[training]") {
  auto blobs = data::gaussian_blobs(64, 6, 3, 4);
  data::DataLoader loader(*blobs, {.batch_size = 32, .seed = 2, .prefetch_threads = 0});
  data::Batch b;
  REQUIRE(loader.next(b));
  auto one_step = [&](adamw optimizer) {
    Init init(3);
    MLP model({6, 8, 3}, init);
    auto step = compile_step(model, blob_loss, optimizer);
    step(b.examples, b.labels);
    std::map<std::string, std::vector<double>> values;
    for_each_parameter(
        model, [&](const std::string& name, Parameter& p) { values[name] = p.value.to_doubles(); });
    return values;
  };
  auto decayed = one_step({.lr = 0.1, .weight_decay = 0.5});
  auto plain = one_step({.lr = 0.1, .weight_decay = 0.0});
  auto grouped = one_step({.lr = 0.1,
                           .weight_decay = 0.5,
                           .groups = {param_group::no_decay_on_biases_norms_embeddings()}});
  for (std::string bias : {"layers.0.bias", "layers.1.bias"}) {
    INFO(bias);
    CHECK(grouped[bias] == plain[bias]);
    CHECK(grouped[bias] != decayed[bias]);
  }
  for (std::string weight : {"layers.0.weight", "layers.1.weight"}) {
    INFO(weight);
    CHECK(grouped[weight] == decayed[weight]);
    CHECK(grouped[weight] != plain[weight]);
  }
  // An lr scale of 0 on the first layer: it does not move, the second does.
  Init init(3);
  MLP before({6, 8, 3}, init);
  auto frozen_first =
      one_step({.lr = 0.1,
                .groups = {{.match = [](const std::string& path,
                                        const Parameter&) { return path.starts_with("layers.0."); },
                            .lr_scale = 0.0}}});
  CHECK(frozen_first["layers.0.weight"] == before.layers[0].weight.value.to_doubles());
  CHECK(frozen_first["layers.1.weight"] != before.layers[1].weight.value.to_doubles());
}
