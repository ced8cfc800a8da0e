// tests/test_null_gpu_first_run.cpp — where a CUDA program's first run spends its time
// (SINTER_TIME_PHASES=1), on the null driver
#include "capture_stderr.hpp"
#include "env_override.hpp"
#include "null_gpu_helpers.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace sinter::testing {
namespace {

TEST_CASE("null gpu: with SINTER_TIME_PHASES=1 a step's first run on cuda says where its time "
          "goes, part by part, and later runs say nothing",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  EnvOverride phases("SINTER_TIME_PHASES", "1");
  constexpr int64_t width = 48, batch = 8;
  HostTensor x =
      HostTensor::from_doubles(DType::f32, {batch, width}, std::vector<double>(batch * width, 0.5));
  HostTensor y = HostTensor::from_doubles(DType::i32, {batch}, std::vector<double>(batch, 1));
  Init init(9);
  Mlp model(width, init);
  auto step = compile_step(
      model, [](Mlp& m, Var in, Var labels) { return cross_entropy_loss(m(in), labels); },
      adamw{.lr = 1e-3});
  std::string first = capture_stderr([&] { step(x, y).loss.value(); });
  INFO(first);
  // The parts in the order they run, then the whole (train_step's `first run`).
  std::size_t at = 0;
  for (const char* part : {"buffers", "batch", "parameters", "launches", "wait"}) {
    std::string line = std::string("sinter: phase first run.") + part + " ";
    std::size_t found = first.find(line, at);
    INFO(line);
    REQUIRE(found != std::string::npos);
    at = found + line.size();
  }
  CHECK(first.find("sinter: phase first run ", at) != std::string::npos);
  std::string second = capture_stderr([&] { step(x, y).loss.value(); });
  INFO(second);
  CHECK(second.find("first run") == std::string::npos);
}

} // namespace
} // namespace sinter::testing
