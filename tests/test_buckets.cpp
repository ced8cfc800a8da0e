// tests/test_buckets.cpp — shape buckets: variable lengths compile one program per bucket, and
// padding changes no loss, gradient or update
#include "dsl/sinter.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <set>

using namespace sinter;

namespace {

constexpr int64_t vocab = 32;

/// Token ids [rows, length] in [0, vocab), seeded.
HostTensor random_ids(std::mt19937& rng, int64_t rows, int64_t length) {
  std::uniform_int_distribution<int> token(0, static_cast<int>(vocab) - 1);
  std::vector<double> ids(static_cast<std::size_t>(rows * length));
  for (double& id : ids)
    id = token(rng);
  return HostTensor::from_doubles(DType::i32, {rows, length}, ids);
}

HostTensor random_floats(std::mt19937& rng, Shape shape) {
  std::normal_distribution<double> normal;
  std::vector<double> values(static_cast<std::size_t>(numel(shape)));
  for (double& v : values)
    v = normal(rng);
  return HostTensor::from_doubles(DType::f32, std::move(shape), values);
}

double max_abs_difference(const HostTensor& a, const HostTensor& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a.at(i) - b.at(i)));
  return worst;
}

/// A bidirectional (non-causal) token model: embeddings, one transformer block, per-token
/// logits. Its attention sees every key, so padded keys must be masked.
struct Bidirectional {
  BOOST_HANA_DEFINE_STRUCT(Bidirectional, (Embedding, tokens), (TransformerBlock, block),
                           (Linear, head));
  Bidirectional(Init& init)
      : tokens(vocab, 16, init), block(16, 2, false, init), head(16, vocab, init) {}
  Var operator()(const Var& ids) const { return head(block(tokens(ids))); }
};

/// One linear layer.
struct Projection {
  BOOST_HANA_DEFINE_STRUCT(Projection, (Linear, layer));
};

const std::vector<int64_t> sizes{4, 8, 16, 32};

} // namespace

TEST_CASE("100 random lengths of a GPT step compile at most 4 programs, each loss the unpadded "
          "computation's",
          "[buckets]") {
  Init init(5);
  GPT model(GPTConfig{.vocab = vocab, .context = 32, .dim = 16, .depth = 2, .heads = 2}, init);
  auto loss_fn = [](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next); };
  auto step =
      compile_step(model, loss_fn, adamw{.lr = 3e-3},
                   {.batch_names = {"ids", "next"}, .buckets = {{"ids", sizes}, {"next", sizes}}});
  // The reference: the same loss on the unpadded batch (one program per length).
  auto unpadded = compile_eval(model, loss_fn, {"ids", "next"});
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> length_of(1, 32);
  std::set<int64_t> buckets_hit;
  double worst = 0;
  for (int call = 0; call < 100; ++call) {
    int64_t length = length_of(rng);
    HostTensor ids = random_ids(rng, 3, length), next = random_ids(rng, 3, length);
    double expected = unpadded(ids, next).at(0); // the weights before this step's update
    double loss = step(ids, next).loss.value();
    INFO("call " << call << ", length " << length);
    REQUIRE(std::isfinite(loss));
    worst = std::max(worst, std::abs(loss - expected) / std::abs(expected));
    REQUIRE(loss == Approx(expected).epsilon(1e-5));
    buckets_hit.insert(*std::lower_bound(sizes.begin(), sizes.end(), length));
  }
  INFO("largest relative difference " << worst);
  CHECK(buckets_hit.size() == 4);
  CHECK(step.runtime().compilations() == buckets_hit.size());
  CHECK(step.runtime().compilations() <= 4);
}

// SGD, not AdamW: Adam divides each gradient by its own scale, so a gradient that is zero in
// exact arithmetic (a key bias: softmax ignores a constant added to every score) turns its
// rounding noise into full-size steps of either sign, with or without padding.
TEST_CASE("a bucketed GPT step updates the weights as the unpadded step does", "[buckets]") {
  GPTConfig config{.vocab = vocab, .context = 32, .dim = 16, .depth = 2, .heads = 2};
  Init init_a(9), init_b(9);
  GPT padded_model(config, init_a), plain_model(config, init_b);
  auto loss_fn = [](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next); };
  auto padded = compile_step(padded_model, loss_fn, sgd{.lr = 0.05, .momentum = 0.9},
                             {.batch_names = {"ids", "next"},
                              .clip_grad_norm = 1.0,
                              .buckets = {{"ids", sizes}, {"next", sizes}}});
  auto plain = compile_step(plain_model, loss_fn, sgd{.lr = 0.05, .momentum = 0.9},
                            {.batch_names = {"ids", "next"}, .clip_grad_norm = 1.0});
  std::mt19937 rng(3);
  for (int64_t length : {3, 7, 8, 13, 20, 32, 5}) {
    INFO("length " << length);
    HostTensor ids = random_ids(rng, 4, length), next = random_ids(rng, 4, length);
    double a = padded(ids, next).loss.value(), b = plain(ids, next).loss.value();
    CHECK(a == Approx(b).epsilon(1e-5));
    std::vector<const HostTensor*> plain_values;
    for_each_parameter(plain_model,
                       [&](const std::string&, Parameter& p) { plain_values.push_back(&p.value); });
    std::size_t i = 0;
    for_each_parameter(padded_model, [&](const std::string& name, Parameter& p) {
      INFO(name);
      CHECK(max_abs_difference(p.value, *plain_values[i++]) < 1e-5);
    });
  }
  CHECK(padded.runtime().compilations() == 4); // 4, 8, 16 and 32
}

TEST_CASE("bucketed non-causal attention never attends to padded keys", "[buckets]") {
  Init init(2);
  Bidirectional model(init);
  auto loss_fn = [](Bidirectional& m, Var ids, Var labels) {
    return cross_entropy_loss(m(ids), labels);
  };
  auto step = compile_step(
      model, loss_fn, sgd{.lr = 0.1},
      {.batch_names = {"ids", "labels"}, .buckets = {{"ids", sizes}, {"labels", sizes}}});
  auto unpadded = compile_eval(model, loss_fn, {"ids", "labels"});
  std::mt19937 rng(4);
  for (int64_t length : {1, 5, 9, 31}) {
    INFO("length " << length);
    HostTensor ids = random_ids(rng, 2, length), labels = random_ids(rng, 2, length);
    double expected = unpadded(ids, labels).at(0);
    CHECK(step(ids, labels).loss.value() == Approx(expected).epsilon(1e-5));
  }
}

TEST_CASE("bucketed mse_loss and padded_mean count real positions only", "[buckets]") {
  Init init(8);
  Projection model{Linear(6, 6, init)};
  auto mse = [](Projection& m, Var x, Var target) { return mse_loss(m.layer(x), target); };
  // The per-row form, reduced by padded_mean over the rows: the mean of the rows' means.
  auto rows_then_mean = [](Projection& m, Var x, Var target) {
    return padded_mean(mse_loss(m.layer(x), target, Reduction::none));
  };
  auto mse_step =
      compile_step(model, mse, sgd{.lr = 0.0},
                   {.batch_names = {"x", "target"}, .buckets = {{"x", sizes}, {"target", sizes}}});
  auto rows_step =
      compile_step(model, rows_then_mean, sgd{.lr = 0.0},
                   {.batch_names = {"x", "target"}, .buckets = {{"x", sizes}, {"target", sizes}}});
  auto mse_ref = compile_eval(model, mse, {"x", "target"});
  auto rows_ref = compile_eval(model, rows_then_mean, {"x", "target"});
  std::mt19937 rng(6);
  for (int64_t length : {2, 6, 17}) {
    INFO("length " << length);
    HostTensor x = random_floats(rng, {3, length, 6}), target = random_floats(rng, {3, length, 6});
    CHECK(mse_step(x, target).loss.value() == Approx(mse_ref(x, target).at(0)).epsilon(1e-5));
    CHECK(rows_step(x, target).loss.value() == Approx(rows_ref(x, target).at(0)).epsilon(1e-5));
  }
}

TEST_CASE("bad shape buckets are named with how to fix them", "[buckets]") {
  Init init(1);
  GPT model(GPTConfig{.vocab = vocab, .context = 32, .dim = 16, .depth = 1, .heads = 2}, init);
  auto loss_fn = [](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next); };
  auto make = [&](ShapeBuckets buckets) {
    return compile_step(model, loss_fn, adamw{.lr = 1e-3},
                        {.batch_names = {"ids", "next"}, .buckets = std::move(buckets)});
  };
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(make({{"tokens", {8}}}), Contains("'tokens'") && Contains("ids, next"));
  CHECK_THROWS_WITH(make({{"ids", {}}}), Contains("no sizes"));
  CHECK_THROWS_WITH(make({{"ids", {0, 8}}}), Contains("must be >= 1"));
  CHECK_THROWS_WITH(make({{"ids", {8, 8}}}), Contains("twice"));
  std::mt19937 rng(1);
  {
    auto step = make({{"ids", {8, 16}}, {"next", {8, 16}}});
    CHECK_THROWS_WITH(step(random_ids(rng, 2, 20), random_ids(rng, 2, 20)),
                      Contains("length 20") && Contains("largest bucket 16") &&
                          Contains("add a bucket of at least 20"));
    CHECK_THROWS_WITH(step(random_ids(rng, 2, 5), random_ids(rng, 2, 6)),
                      Contains("share one length"));
  }
  {
    auto step = make({{"ids", {8, 16}}, {"next", {16}}});
    CHECK_THROWS_WITH(step(random_ids(rng, 2, 5), random_ids(rng, 2, 5)),
                      Contains("sizes must agree"));
  }
  {
    Projection rows{Linear(4, 2, init)};
    auto step = compile_step(
        rows, [](Projection& m, Var x, Var y) { return cross_entropy_mean(m.layer(x), y); },
        sgd{.lr = 0.1}, {.batch_names = {"x", "y"}, .buckets = {{"y", {4}}}});
    CHECK_THROWS_WITH(step(random_floats(rng, {3, 4}), HostTensor(DType::i32, {3})),
                      Contains("bucketed inputs are [batch, length, ...]"));
  }
  SiftOptions sift{.beta = 1.0};
  CHECK_THROWS_WITH(
      compile_step(
          model, loss_fn, adamw{.lr = 1e-3},
          {.batch_names = {"ids", "next"}, .sift = sift, .buckets = {{"ids", {8}}, {"next", {8}}}}),
      Contains("in-step sifting cannot be combined"));
}

TEST_CASE("a bucketed step's first compile also plans the two nearest other buckets", "[buckets]") {
  // Two: at one of them a length may equal another dim and some kernels fuse differently.
  const ShapeBuckets buckets{{"ids", {8, 16, 32, 64}}};
  const std::vector<std::string> names{"ids", "labels"};
  std::mt19937 rng(3);
  auto others_of = [&](int64_t length) {
    std::vector<HostTensor> batch{random_ids(rng, 2, length), random_ids(rng, 2, 1)};
    BucketedBatch padded = pad_to_bucket(buckets, names, batch);
    std::vector<int64_t> lengths;
    for (const std::vector<HostTensor>& other : batches_at_other_buckets(buckets, names, padded)) {
      REQUIRE(other.size() == padded.tensors.size()); // the lengths too
      CHECK(other[1].shape() == Shape{2, 1});         // inputs without buckets stay as they are
      lengths.push_back(other[0].shape()[1]);
    }
    return lengths;
  };
  CHECK(others_of(50) == std::vector<int64_t>{32, 16}); // the nearest smaller first
  CHECK(others_of(16) == std::vector<int64_t>{8, 32});
  CHECK(others_of(3) == std::vector<int64_t>{16, 32}); // then the nearest larger
  const ShapeBuckets one{{"ids", {8}}};
  std::vector<HostTensor> batch{random_ids(rng, 2, 5), random_ids(rng, 2, 1)};
  CHECK(batches_at_other_buckets(one, names, pad_to_bucket(one, names, batch)).empty());
}
