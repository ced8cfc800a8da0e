// tests/bench/dp_scaling.cpp — one rank's side of the data-parallel benchmark (tests/bench/
// dp_scaling.sh runs it alone and under `mpirun -np 2`)
//
// The recipes' models (--model mlp: 784-512-256-10; --model vit: ViTConfig{28, 7, 64, 4, 4,
// 10}) trained by compile_step with AdamW on a fixed global batch of --batch rows (default
// 128): each of the N ranks takes its N-th of the rows, so one rank and two ranks do the same
// work per step. After --warmup steps (first call and compile included) every rank times
// --iters steps between two barriers. Rank 0 prints one line:
//   peer=sinter model=<m> ranks=<N> zero=<Z> batch=<global> threads=<per rank>
//   step_s=<wall seconds per step> collectives=<per step> collective_mb=<per step>
//   in_flight_ms=<per step> waited_ms=<per step> hidden=<1 - waited / in flight>
//   optimizer_state_bytes=<this rank's m and v> parameter_bytes=<whole parameters>
//   planned_peak_bytes=<the step's arena and outputs> cpu_s=<CPU seconds of all ranks per step>
//   loss=<last step>
// in_flight_ms is how long the step's collectives ran from start to completion, waited_ms how
// long the step blocked on them: the difference ran under the backward pass. cpu_s sums every
// rank's user and system time per step: on a shared machine it varies less than wall time.
#include "bench_timing.hpp"
#include "dsl/sinter.hpp"
#include "recipes/fashion_mlp.hpp"
#include "recipes/fashion_vit.hpp"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

using namespace sinter;

namespace {

/// This process's CPU time (user + system), in seconds.
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct Options {
  std::string model = "vit";
  int64_t batch = 128;
  int zero = 0;
  int64_t bucket_bytes = int64_t{25} << 20;
  bench::StepFlags step{.threads = 1, .warmup = 10, .iters = 100};
};

template <class Model> int run(Model& model, const Options& opt) {
  Communicator& ranks = world();
  if (opt.batch % ranks.size() != 0) {
    std::fprintf(stderr, "dp_scaling: --batch %lld is not a multiple of %d ranks\n",
                 static_cast<long long>(opt.batch), ranks.size());
    return 2;
  }
  int64_t rows = opt.batch / ranks.size(), first = rows * ranks.rank();
  HostTensor all_images = bench::pattern({opt.batch, 28, 28}, 0.5, 0.1, 0.5);
  std::vector<double> labels;
  for (int64_t r = 0; r < rows; ++r)
    labels.push_back(static_cast<double>((first + r) % 10));
  HostTensor images(DType::f32, {rows, 28, 28});
  std::memcpy(images.bytes().data(), all_images.bytes().data() + first * 28 * 28 * 4,
              images.bytes().size());
  HostTensor y = HostTensor::from_doubles(DType::i32, {rows}, labels);
  auto step = compile_step(
      model, [](Model& m, Var x, Var t) { return cross_entropy_mean(m(x), t); },
      adamw{.lr = 1e-3, .weight_decay = 1e-4},
      {.batch_names = {"images", "labels"}, .zero = opt.zero, .bucket_bytes = opt.bucket_bytes});
  double loss = 0;
  for (int i = 0; i < std::max(1, opt.step.warmup); ++i)
    loss = step(images, y).loss.value();
  ranks.barrier();
  ranks.reset_stats();
  double cpu_start = cpu_seconds();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < opt.step.iters; ++i)
    loss = step(images, y).loss.value();
  CollectiveStats stats = ranks.stats(); // the steps' own collectives, all waited for
  std::vector<double> cpu{cpu_seconds() - cpu_start};
  ranks.all_reduce(cpu.data(), 1, DType::f64, ReduceOp::sum); // every rank's CPU time
  ranks.barrier();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (ranks.rank() != 0) return 0;
  double per = 1.0 / opt.step.iters;
  TrainStep::ResidentBytes resident = step.runtime().resident_bytes();
  std::printf("peer=sinter model=%s ranks=%d zero=%d batch=%lld threads=%d step_s=%.6f "
              "collectives=%.1f collective_mb=%.3f in_flight_ms=%.3f waited_ms=%.3f hidden=%.3f "
              "optimizer_state_bytes=%lld parameter_bytes=%lld planned_peak_bytes=%lld "
              "cpu_s=%.6f loss=%.6f\n",
              opt.model.c_str(), ranks.size(), opt.zero, static_cast<long long>(opt.batch),
              opt.step.threads, seconds * per, static_cast<double>(stats.count) * per,
              static_cast<double>(stats.bytes) * per / 1e6, stats.in_flight_seconds * 1e3 * per,
              stats.waited_seconds * 1e3 * per, stats.hidden_fraction(),
              static_cast<long long>(resident.optimizer_state),
              static_cast<long long>(resident.parameters),
              static_cast<long long>(step.runtime().program().memory_plan().peak_bytes()),
              cpu[0] * per, loss);
  return 0;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--model mlp|vit] [--batch N (global)] [--zero 0|1|2] "
               "[--bucket-kb N] [--threads N] [--warmup N] [--iters N]\n"
               "  run alone or under mpirun -np N; rank 0 prints the result line\n",
               argv0);
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    bool ok = true;
    if (std::optional<bool> step_flag = bench::read_step_flag(argc, argv, i, opt.step))
      ok = *step_flag;
    else if (a == "--model" && i + 1 < argc)
      opt.model = argv[++i];
    else if (a == "--batch" && i + 1 < argc)
      ok = (opt.batch = std::atoll(argv[++i])) > 0;
    else if (a == "--zero" && i + 1 < argc)
      ok = (opt.zero = std::atoi(argv[++i])) >= 0 && opt.zero <= 2;
    else if (a == "--bucket-kb" && i + 1 < argc)
      ok = (opt.bucket_bytes = std::atoll(argv[++i]) * 1024) > 0;
    else
      return usage(argv[0]);
    if (!ok) return usage(argv[0]);
  }
  setenv("SINTER_NUM_THREADS", std::to_string(opt.step.threads).c_str(), 1);
  try {
    Init init(0);
    if (opt.model == "mlp") {
      recipe::FashionMLP model({784, 512, 256, 10}, init);
      return run(model, opt);
    }
    if (opt.model == "vit") {
      recipe::FashionViT model(ViTConfig{28, 7, 64, 4, 4, 10}, init);
      return run(model, opt);
    }
    return usage(argv[0]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dp_scaling: %s\n", e.what());
    return 1;
  }
}
