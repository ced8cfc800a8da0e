// tests/test_collectives.cpp — the job's communicator: alone (a world of one) and under
// `mpirun -np 2` (meson test `collectives-2-ranks`), every collective against its definition
#include "env_override.hpp"
#include "jit/api.hpp"
#include "jit/dist/communicator.hpp"
#include "jit/runtime/memory_plan.hpp"
#include "kernels/cuda/nccl_bridge.hpp"
#include "ops/value.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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
  {
    testing::EnvOverride timeout("SINTER_COLLECTIVE_TIMEOUT", "2.5");
    CHECK(collective_timeout_from_environment().count() == 2.5);
  }
  {
    testing::EnvOverride timeout("SINTER_COLLECTIVE_TIMEOUT", "soon");
    CHECK_THROWS_WITH(collective_timeout_from_environment(),
                      Catch::Contains("SINTER_COLLECTIVE_TIMEOUT='soon'"));
  }
  testing::EnvOverride unset("SINTER_COLLECTIVE_TIMEOUT", std::nullopt);
  CHECK(collective_timeout_from_environment().count() == 300);
}

TEST_CASE("collective IR ops compiled for the CPU give every rank what they define, started "
          "early and waited for late",
          "[collectives]") {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  Graph g;
  Value x = input(g, "x", {DType::f32, {2 * n, 3}});
  Value scale = input(g, "scale", {DType::f32, {}});
  // Each collective reads a computed value (x·2 and friends), so fusion stores it first.
  g.add_output("sum", all_reduce(x * 2.0, n).id);
  g.add_output("mine", reduce_scatter(x + 1.0, n).id);
  g.add_output("all", all_gather(x * scale, n).id);
  g.add_output("root", broadcast_from(x - 1.0, n, n - 1).id);
  g.add_output("later", (all_reduce(x * 3.0, n) + 1.0).id);
  CompiledGraph compiled(g, std::nullopt, Device{Backend::cpu});
  std::vector<float> mine = contribution(r, 6 * n);
  HostTensor xs(DType::f32, {2 * n, 3});
  std::memcpy(xs.bytes().data(), mine.data(), xs.bytes().size());
  float two = 2;
  HostTensor s(DType::f32, {});
  std::memcpy(s.bytes().data(), &two, sizeof two);
  std::vector<HostTensor> in{xs, s};
  std::vector<HostTensor> out = compiled.run(in);
  auto value = [&](int rank, int64_t i) { return static_cast<double>(100 * rank + i); };
  for (int64_t i = 0; i < 6 * n; ++i) {
    double total = 0;
    for (int q = 0; q < n; ++q)
      total += value(q, i);
    CHECK(out[0].at(i) == 2 * total);
    CHECK(out[3].at(i) == value(n - 1, i) - 1);
    CHECK(out[4].at(i) == 3 * total + 1);
  }
  for (int64_t i = 0; i < 6; ++i) { // rank r's block: rows 2r, 2r + 1
    double total = 0;
    for (int q = 0; q < n; ++q)
      total += value(q, 6 * r + i) + 1;
    CHECK(out[1].at(i) == total);
  }
  for (int q = 0; q < n; ++q)
    for (int64_t i = 0; i < 6 * n; ++i)
      CHECK(out[2].at(q * 6 * n + i) == 2 * value(q, i));

  // A graph built for another world size is refused by name.
  Graph other;
  other.add_output("y", all_reduce(input(other, "x", {DType::f32, {4}}), n + 1).id);
  CompiledGraph wrong(other, std::nullopt, Device{Backend::cpu});
  HostTensor four(DType::f32, {4});
  CHECK_THROWS_WITH(wrong.run(std::vector<HostTensor>{four}),
                    Catch::Contains("built for " + std::to_string(n + 1) +
                                    " ranks but runs in a job of " + std::to_string(n)));
}

TEST_CASE("a collective starts right after its operand is written and is waited for before "
          "its first reader; its operand stays allocated until then",
          "[collectives]") {
  Graph g;
  Value w = input(g, "w", {DType::f32, {64, 64}});
  Value early = sum(w * w, {1}); // the collective's operand, ready early
  Value chain = w;
  for (int i = 0; i < 4; ++i) // later work that does not need the collective
    chain = matmul(chain, w);
  Value reduced = all_reduce(early, 2);
  g.add_output("y", (reshape(reduced, {64, 1}) + chain).id);
  FusionPlan plan = fuse(g);
  std::size_t collective = plan.kernels.size(), first_gemm = plan.kernels.size();
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    if (plan.kernels[k].kind == KernelKind::collective) collective = k;
    if (plan.kernels[k].kind == KernelKind::gemm && first_gemm == plan.kernels.size())
      first_gemm = k;
  }
  REQUIRE(collective < plan.kernels.size());
  CHECK(collective < first_gemm); // hoisted above the GEMM chain
  std::vector<std::size_t> waits = collective_waits(plan);
  REQUIRE(waits[collective] < plan.kernels.size());
  const Kernel& reader = plan.kernels[waits[collective]];
  CHECK(std::find(reader.reads.begin(), reader.reads.end(), plan.kernels[collective].root) !=
        reader.reads.end());
  CHECK(waits[collective] > first_gemm); // the GEMMs run while it is in flight
  // The operand's buffer lives until the wait (or is the result's, reduced in place).
  MemoryPlan memory(plan);
  const Kernel& k = plan.kernels[collective];
  for (const BufferSlot& slot : memory.slots())
    if (slot.node == k.reads[0]) CHECK((slot.last >= waits[collective] || k.in_place()));
  CHECK(k.in_place()); // its only reader: summed in place
}

TEST_CASE("NCCL loads by dlopen with every entry point the GPU collectives use, and makes a "
          "unique id on the host",
          "[collectives]") {
  kernels::Nccl* nccl = kernels::Nccl::get();
  bool toolkit_has_it = std::filesystem::exists("/usr/local/cuda/lib64/libnccl.so.2") ||
                        std::filesystem::exists("/usr/local/cuda/lib/libnccl.so.2");
  if (!nccl) {
    // Only where no NCCL is installed; the reason names the library and the fix.
    CHECK_FALSE(toolkit_has_it);
    CHECK_THAT(kernels::Nccl::unavailable_reason(),
               Catch::Contains("libnccl.so.2") && Catch::Contains("SINTER_LIBNCCL"));
    return;
  }
  CHECK(nccl->version() >= 21200); // 2.12 or newer
  CHECK(nccl->unique_id_works());
}
