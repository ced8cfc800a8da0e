// tests/test_data_parallel.cpp — data parallel under `mpirun -np 2` (meson test
// `data-parallel-2-ranks`): two ranks on their shards train the same model as one process on
// the whole batch
#include "dsl/sinter.hpp"
#include "jit/data/loader.hpp"
#include "jit/data/synthetic.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace sinter;
using namespace sinter::data;

namespace {

std::vector<double> flat_parameters(MLP& model) {
  std::vector<double> out;
  for_each_parameter(model, [&](const std::string&, Parameter& p) {
    for (int64_t i = 0; i < p.value.size(); ++i)
      out.push_back(p.value.at(i));
  });
  return out;
}

} // namespace

TEST_CASE("two ranks on their shards of each batch train what one process does on the whole "
          "batch (50 AdamW steps)",
          "[distributed]") {
  Communicator& comm = world();
  REQUIRE(comm.size() > 1); // run under mpirun: meson test data-parallel-2-ranks
  auto blobs = gaussian_blobs(800, 6, 4, 3);
  auto loss = [](MLP& m, Var x, Var y) { return cross_entropy_mean(m(x), y); };
  const int64_t global_batch = 16;

  Init init_a(7), init_b(7);
  MLP parallel({6, 32, 4}, init_a), alone({6, 32, 4}, init_b);
  auto dp = compile_step(parallel, loss, adamw{.lr = 0.01});
  auto reference = compile_step(alone, loss, adamw{.lr = 0.01}, {.data_parallel = false});
  DataLoader shard(*blobs, {.batch_size = global_batch,
                            .seed = 11,
                            .prefetch_threads = 0,
                            .shard = comm.rank(),
                            .shards = comm.size()});
  DataLoader whole(*blobs, {.batch_size = global_batch, .seed = 11, .prefetch_threads = 0});
  Batch mine, all;
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 50; ++step) {
    REQUIRE(shard.next(mine));
    REQUIRE(whole.next(all));
    CHECK(mine.examples.shape()[0] == global_batch / comm.size());
    double dp_loss = dp(mine.examples, mine.labels).loss.value();
    double ref_loss = reference(all.examples, all.labels).loss.value();
    CHECK(dp_loss == Approx(ref_loss).epsilon(1e-5)); // the mean over ranks is the global loss
    (step == 0 ? first_loss : last_loss) = ref_loss;
  }
  CHECK(last_loss < 0.7 * first_loss); // it trained
  std::vector<double> got = flat_parameters(parallel), want = flat_parameters(alone);
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / (1e-3 + std::abs(want[i])));
  INFO("largest relative difference " << worst);
  CHECK(worst < 1e-4);

  // Every rank holds the same parameters, to the bit.
  std::vector<double> sums{0};
  for (double v : got)
    sums[0] += v;
  std::vector<double> each(static_cast<std::size_t>(comm.size()));
  comm.all_gather(sums.data(), each.data(), 1, DType::f64);
  for (double s : each)
    CHECK(s == sums[0]);
}

TEST_CASE("ranks that disagree on the model or its starting values are stopped with the "
          "difference named",
          "[distributed]") {
  Communicator& comm = world();
  REQUIRE(comm.size() > 1);
  auto loss = [](MLP& m, Var x, Var y) { return cross_entropy_mean(m(x), y); };
  std::vector<double> labels{0, 1, 2, 3};
  HostTensor x(DType::f32, {4, 6}), y = HostTensor::from_doubles(DType::i32, {4}, labels);
  std::fill(x.bytes().begin(), x.bytes().end(), std::byte{0});

  SECTION("another hidden width on rank 1") {
    Init init(7);
    MLP model({6, comm.rank() == 1 ? 16 : 32, 4}, init);
    auto step = compile_step(model, loss, adamw{.lr = 0.01});
    if (comm.rank() == 1)
      CHECK_THROWS_WITH(step(x, y), Catch::Contains("rank 1 and rank 0 disagree") &&
                                        Catch::Contains("f32[6,16]', on rank 0") &&
                                        Catch::Contains("f32[6,32]"));
    else
      CHECK_THROWS_WITH(step(x, y), Catch::Contains("rank 1 disagree with rank 0"));
  }
  SECTION("another initialisation seed on rank 1") {
    Init init(comm.rank() == 1 ? 8 : 7);
    MLP model({6, 32, 4}, init);
    auto step = compile_step(model, loss, adamw{.lr = 0.01});
    if (comm.rank() == 1)
      CHECK_THROWS_WITH(step(x, y), Catch::Contains("the values of parameter") &&
                                        Catch::Contains("same Init seed or checkpoint"));
    else
      CHECK_THROWS(step(x, y));
  }
  SECTION("the same model and values train") {
    Init init(7);
    MLP model({6, 32, 4}, init);
    auto step = compile_step(model, loss, adamw{.lr = 0.01});
    CHECK_NOTHROW(step(x, y));
  }
}
