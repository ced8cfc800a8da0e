// tests/test_collectives.cpp — the job's communicator: alone (a world of one) and under
// `mpirun -np 2` (meson test `collectives-2-ranks`), every collective against its definition
#include "jit/runtime/communicator.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <numeric>
#include <vector>

using namespace sinter;

namespace {

/// Rank r's contribution: element i is 100 * r + i.
std::vector<float> contribution(int rank, int64_t count) {
  std::vector<float> v(static_cast<std::size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    v[static_cast<std::size_t>(i)] = static_cast<float>(100 * rank + i);
  return v;
}

} // namespace

TEST_CASE("the job's ranks come from the launcher's environment", "[collectives]") {
  WorldPlace place = world_place_from_environment();
  Communicator& c = world();
  CHECK(c.rank() == place.rank);
  CHECK(c.size() == place.size);
  CHECK(c.transport() == (place.size > 1 ? "mpi" : "single"));
}

TEST_CASE("all_reduce, reduce_scatter, all_gather and broadcast give every rank what they "
          "define",
          "[collectives]") {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  const int64_t block = 5;

  std::vector<float> sum = contribution(r, block * n);
  c.all_reduce(sum.data(), block * n, DType::f32, ReduceOp::sum);
  for (int64_t i = 0; i < block * n; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q)
      want += static_cast<float>(100 * q + i);
    CHECK(sum[static_cast<std::size_t>(i)] == want);
  }

  std::vector<double> biggest{static_cast<double>(r), -static_cast<double>(r)};
  c.all_reduce(biggest.data(), 2, DType::f64, ReduceOp::max);
  CHECK(biggest[0] == n - 1);
  CHECK(biggest[1] == 0);

  std::vector<float> send = contribution(r, block * n), mine(block);
  c.reduce_scatter(send.data(), mine.data(), block, DType::f32, ReduceOp::sum);
  for (int64_t i = 0; i < block; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q)
      want += static_cast<float>(100 * q + r * block + i);
    CHECK(mine[static_cast<std::size_t>(i)] == want);
  }

  std::vector<float> own = contribution(r, block), all(static_cast<std::size_t>(block * n));
  c.all_gather(own.data(), all.data(), block, DType::f32);
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < block; ++i)
      CHECK(all[static_cast<std::size_t>(q * block + i)] == static_cast<float>(100 * q + i));

  std::vector<int64_t> seed{r == 0 ? 1234 : -1};
  c.broadcast(seed.data(), 1, DType::i64, 0);
  CHECK(seed[0] == 1234);
  c.barrier();
}

TEST_CASE("collectives refuse what they cannot do, by name", "[collectives]") {
  Communicator& c = world();
  float x = 1;
  CHECK_THROWS_WITH(c.broadcast(&x, 1, DType::f32, c.size()),
                    Catch::Contains("broadcast from rank " + std::to_string(c.size())));
  if (c.transport() == "mpi") {
    std::vector<uint16_t> half(4);
    CHECK_THROWS_WITH(c.all_reduce(half.data(), 4, DType::bf16, ReduceOp::sum),
                      Catch::Contains("not bf16"));
  }
}

TEST_CASE("SINTER_COLLECTIVE_TIMEOUT is read in seconds; a malformed value is named",
          "[collectives]") {
  const char* saved = std::getenv("SINTER_COLLECTIVE_TIMEOUT");
  std::string keep = saved ? saved : "";
  setenv("SINTER_COLLECTIVE_TIMEOUT", "2.5", 1);
  CHECK(collective_timeout_from_environment().count() == 2.5);
  setenv("SINTER_COLLECTIVE_TIMEOUT", "soon", 1);
  CHECK_THROWS_WITH(collective_timeout_from_environment(),
                    Catch::Contains("SINTER_COLLECTIVE_TIMEOUT='soon'"));
  unsetenv("SINTER_COLLECTIVE_TIMEOUT");
  CHECK(collective_timeout_from_environment().count() == 300);
  if (saved) setenv("SINTER_COLLECTIVE_TIMEOUT", keep.c_str(), 1);
}
