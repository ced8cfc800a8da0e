// tests/test_data_parallel.cpp — data parallel under `mpirun -np 2` (meson test
// `data-parallel-2-ranks`): two ranks on their shards train the same model as one process on
// the whole batch
#include "dsl/sinter.hpp"
#include "jit/data/loader.hpp"
#include "jit/data/synthetic.hpp"
#include "jit/io/sharded_checkpoint.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <tuple>
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

/// The largest difference between `got` and `want`, relative to 1e-3 + |want|.
double worst_relative(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / (1e-3 + std::abs(want[i])));
  return worst;
}

/// Every rank holds the same `values`, to the bit (their sums compared across ranks).
void check_same_on_every_rank(Communicator& comm, const std::vector<double>& values) {
  std::vector<double> sums{std::accumulate(values.begin(), values.end(), 0.0)};
  std::vector<double> each(static_cast<std::size_t>(comm.size()));
  comm.all_gather(sums.data(), each.data(), 1, DType::f64);
  for (double s : each)
    CHECK(s == sums[0]);
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
  double worst = worst_relative(got, want);
  INFO("largest relative difference " << worst);
  CHECK(worst < 1e-4);

  check_same_on_every_rank(comm, got);
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
  SECTION("parameters that drift apart are caught at the next check (every 5 updates)") {
    Init init(7);
    MLP model({6, 32, 4}, init);
    auto step = compile_step(model, loss, adamw{.lr = 0.01}, {.check_every = 5});
    for (int s = 0; s < 4; ++s)
      step(x, y);
    if (comm.rank() == 1) // a rank whose values change behind the step's back
      for_each_parameter(
          model, [](const std::string&, Parameter& p) { p.value.set(0, p.value.at(0) + 1.0); });
    if (comm.rank() == 1)
      CHECK_THROWS_WITH(step(x, y), Catch::Contains("disagree on the parameters after update 5") &&
                                        Catch::Contains("checksum"));
    else
      CHECK_THROWS_WITH(step(x, y), Catch::Contains("rank 1 disagree with rank 0"));
  }
  SECTION("the same model and values train") {
    Init init(7);
    MLP model({6, 32, 4}, init);
    auto step = compile_step(model, loss, adamw{.lr = 0.01});
    CHECK_NOTHROW(step(x, y));
  }
}

TEST_CASE("ZeRO-1 and ZeRO-2 train what plain data parallel does, keeping 1/ranks of the "
          "optimizer state (50 AdamW steps, clipped, several gradient buckets)",
          "[distributed]") {
  Communicator& comm = world();
  REQUIRE(comm.size() > 1);
  auto blobs = gaussian_blobs(800, 6, 4, 3);
  auto loss = [](MLP& m, Var x, Var y) { return cross_entropy_mean(m(x), y); };
  // Tensors of 6·33 and 33·4 floats: 512-byte buckets put them in several buckets, and their
  // sizes are odd, so the last shard is padded.
  const std::vector<int64_t> widths{6, 33, 4};
  auto train = [&](int zero, int64_t accumulate) {
    Init init(7);
    auto model = std::make_unique<MLP>(widths, init);
    auto step = compile_step(
        *model, loss, adamw{.lr = 0.01},
        {.clip_grad_norm = 0.5, .accumulate = accumulate, .zero = zero, .bucket_bytes = 512});
    DataLoader shard(*blobs, {.batch_size = 16,
                              .seed = 11,
                              .prefetch_threads = 0,
                              .shard = comm.rank(),
                              .shards = comm.size()});
    Batch b;
    std::vector<double> losses;
    for (int call = 0; call < 50 * accumulate; ++call) {
      if (!shard.next(b)) {
        shard.start_epoch(shard.position().epoch + 1);
        REQUIRE(shard.next(b));
      }
      losses.push_back(step(b.examples, b.labels).loss.value());
    }
    int64_t state_bytes = 0;
    for (const auto& [name, tensor] : step.runtime().state())
      state_bytes += static_cast<int64_t>(tensor->byte_size());
    return std::tuple{flat_parameters(*model), losses, state_bytes};
  };
  auto [plain, plain_losses, plain_state] = train(0, 1);
  for (int zero : {1, 2}) {
    INFO("zero " << zero);
    auto [got, losses, state] = train(zero, 1);
    double worst = worst_relative(got, plain);
    INFO("largest relative difference " << worst);
    CHECK(worst < 1e-4);
    // Relative to the loss, with a floor of 1e-7: a confident batch's f32 cross-entropy is
    // about 0.001, and its rounding is that of the log-sum-exp of logits near 1 (ulps of 6e-8),
    // not of the small loss (on an AVX-512 host, 2026-11-29, ZeRO's shard boundaries moved one
    // such loss, 0.00136, by 1.5e-8).
    for (std::size_t s = 0; s < losses.size(); ++s)
      CHECK(losses[s] == Approx(plain_losses[s]).epsilon(1e-5).margin(1e-7));
    // Each rank keeps its shard of m and v: half of plain's, plus the padding of odd sizes.
    INFO("state bytes " << state << " of " << plain_state);
    CHECK(state <= plain_state / comm.size() + 64 * comm.size());
    CHECK(state >= plain_state / comm.size());
    check_same_on_every_rank(comm, got);
  }
  // Accumulation reduces once per update, in the update program.
  auto [accumulated, losses, state] = train(2, 2);
  CHECK(accumulated.size() == plain.size());
  CHECK(losses.back() < 0.7 * losses.front());
}

TEST_CASE("checkpoints move between world sizes: two ZeRO-2 ranks resume on one process and one "
          "process resumes on two ZeRO-1 ranks, continuing the same losses",
          "[distributed]") {
  Communicator& comm = world();
  REQUIRE(comm.size() > 1);
  // One directory for the job: rank 0's, named to the others.
  std::unique_ptr<testing::TempDir> made;
  std::vector<int64_t> length{0};
  std::string dir;
  if (comm.rank() == 0) {
    made = std::make_unique<testing::TempDir>("sinter-reshard");
    dir = made->path.string();
    length[0] = static_cast<int64_t>(dir.size());
  }
  comm.broadcast(length.data(), 1, DType::i64, 0);
  dir.resize(static_cast<std::size_t>(length[0]));
  comm.broadcast(dir.data(), length[0], DType::boolean, 0);
  const std::filesystem::path folder = dir;

  auto blobs = gaussian_blobs(800, 6, 4, 3);
  auto loss = [](MLP& m, Var x, Var y) { return cross_entropy_mean(m(x), y); };
  const std::vector<int64_t> widths{6, 33, 4};
  auto loader = [&](bool shard) {
    return DataLoader(*blobs, {.batch_size = 16,
                               .seed = 11,
                               .prefetch_threads = 0,
                               .shard = shard ? comm.rank() : 0,
                               .shards = shard ? comm.size() : 1});
  };
  auto lone = StepOptions{.data_parallel = false};
  // The reference: one process, 40 steps on whole batches, saved (by rank 0) after 20.
  Init init(7);
  MLP reference(widths, init);
  auto reference_step = compile_step(reference, loss, adamw{.lr = 0.01}, lone);
  DataLoader whole = loader(false);
  Batch b;
  std::vector<double> want;
  for (int s = 0; s < 40; ++s) {
    REQUIRE(whole.next(b));
    want.push_back(reference_step(b.examples, b.labels).loss.value());
    if (s == 19 && comm.rank() == 0)
      save_checkpoint(folder / "one.safetensors", reference, reference_step);
  }
  comm.barrier();

  SECTION("2 ranks (ZeRO-2) -> 1 process") {
    Init same(7);
    MLP model(widths, same);
    auto step = compile_step(model, loss, adamw{.lr = 0.01}, {.zero = 2, .bucket_bytes = 512});
    DataLoader mine = loader(true);
    for (int s = 0; s < 20; ++s) {
      REQUIRE(mine.next(b));
      CHECK(step(b.examples, b.labels).loss.value() == Approx(want[s]).epsilon(1e-5));
    }
    save_checkpoint(folder / "two.safetensors", model, step);
    CHECK(std::filesystem::exists(folder / "two.step20.rank0-of-2.safetensors"));
    CHECK(std::filesystem::exists(folder / "two.step20.rank1-of-2.safetensors"));
    // Every rank resumes alone from the two ranks' shards, and from their consolidation.
    for (std::string file : {"two.safetensors", "consolidated.safetensors"}) {
      INFO(file);
      if (file == "consolidated.safetensors" && comm.rank() == 0)
        consolidate_checkpoint(folder / "two.safetensors", folder / file);
      comm.barrier();
      Init other(99);
      MLP resumed(widths, other);
      auto again = compile_step(resumed, loss, adamw{.lr = 0.01}, lone);
      load_checkpoint(folder / file, resumed, again);
      CHECK(again.steps() == 20);
      DataLoader rest = loader(false);
      for (int s = 0; s < 40; ++s) {
        REQUIRE(rest.next(b));
        if (s >= 20)
          CHECK(again(b.examples, b.labels).loss.value() == Approx(want[s]).epsilon(1e-5));
      }
      CHECK(worst_relative(flat_parameters(resumed), flat_parameters(reference)) < 1e-4);
    }
    comm.barrier();
  }
  SECTION("1 process -> 2 ranks (ZeRO-1)") {
    Init other(99);
    MLP model(widths, other);
    auto step = compile_step(model, loss, adamw{.lr = 0.01}, {.zero = 1, .bucket_bytes = 512});
    load_checkpoint(folder / "one.safetensors", model, step);
    DataLoader mine = loader(true);
    for (int s = 0; s < 40; ++s) {
      REQUIRE(mine.next(b));
      if (s >= 20) CHECK(step(b.examples, b.labels).loss.value() == Approx(want[s]).epsilon(1e-5));
    }
    CHECK(worst_relative(flat_parameters(model), flat_parameters(reference)) < 1e-4);
  }
  comm.barrier(); // rank 0 removes the directory only when every rank is done with it
}
