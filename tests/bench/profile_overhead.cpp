// tests/bench/profile_overhead.cpp — what profiling and --check-numerics cost per step
// (docs/profiling.md, docs/perf.md)
//
// Trains the mlp recipe's model (784-512-256-10, batch 128, AdamW) on 8 synthetic batches held in
// memory (no loader: only the step is timed), in blocks
// of steps, alternating in one process: a plain block, a block under a profile
// (profile::start before it, stop after: writing the files is outside the timed steps), and a
// block with numerics checked. Each block's per-step time is the median of its steps after the
// first two (the profile measures the device peak in its first step). The overhead of a mode is
// the median over rounds of its block against the plain block next to it, so a change in the
// machine's load between rounds cancels.
//
// Usage: profile_overhead [--rounds R] [--steps S] [--threads T] [--batch B]
// Prints one line per mode: `<mode> <ms> ms per step, <+x.x>% against plain (rounds a..b)`.
#include "dsl/sinter.hpp"
#include "jit/data/synthetic.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

using namespace sinter;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int64_t flag(int argc, char** argv, const std::string& name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i] == "--" + name) {
      char* end = nullptr;
      long long v = std::strtoll(argv[i + 1], &end, 10);
      if (!end || *end || v < 1) {
        std::fprintf(stderr, "profile_overhead: --%s needs a positive integer\n", name.c_str());
        std::exit(2);
      }
      return v;
    }
  return fallback;
}

} // namespace

int main(int argc, char** argv) {
  const int64_t rounds = flag(argc, argv, "rounds", 12), steps = flag(argc, argv, "steps", 40);
  const int64_t batch = flag(argc, argv, "batch", 128);
  setenv("SINTER_NUM_THREADS", std::to_string(flag(argc, argv, "threads", 2)).c_str(), 1);
  setenv("SINTER_LOG", "0", 0);
  auto data = data::gaussian_blobs(8192, 784, 10, 1);
  Init init(0);
  MLP model({784, 512, 256, 10}, init);
  auto loss = [](MLP& m, Var x, Var y) -> Var { return cross_entropy_loss(m(x), y); };
  auto step = compile_step(model, loss, adamw{.lr = 1e-3}, {.batch_names = {"images", "labels"}});
  // Batches read once: reading synthetic data on loader threads would compete for the cores.
  std::vector<data::Batch> batches(8);
  {
    data::DataLoader loader(*data, {.batch_size = batch, .seed = 1});
    for (data::Batch& b : batches)
      loader.next(b);
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("sinter-profile-overhead-" + std::to_string(getpid()));

  auto block = [&] { // the median step time of one block, in ms
    std::vector<double> ms;
    for (int64_t i = 0; i < steps; ++i) {
      const data::Batch& b = batches[static_cast<std::size_t>(i) % batches.size()];
      auto t0 = std::chrono::steady_clock::now();
      (void)step(b.examples, b.labels).loss.value();
      auto t1 = std::chrono::steady_clock::now();
      if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    return median(ms);
  };
  block(); // compile and warm up
  std::vector<double> plain, profiled, checked, profile_ratio, check_ratio;
  for (int64_t r = 0; r < rounds; ++r) {
    plain.push_back(block());
    profile::start(dir, {.print = false});
    profiled.push_back(block());
    profile::stop();
    set_check_numerics(true);
    checked.push_back(block());
    set_check_numerics(false);
    profile_ratio.push_back(profiled.back() / plain.back() - 1);
    check_ratio.push_back(checked.back() / plain.back() - 1);
  }
  std::filesystem::remove_all(dir);
  auto range = [](const std::vector<double>& v) {
    return std::pair{*std::min_element(v.begin(), v.end()) * 100,
                     *std::max_element(v.begin(), v.end()) * 100};
  };
  std::printf("profile_overhead: mlp 784-512-256-10, batch %lld, %s threads, %lld rounds of %lld "
              "steps per mode\n",
              static_cast<long long>(batch), std::getenv("SINTER_NUM_THREADS"),
              static_cast<long long>(rounds), static_cast<long long>(steps));
  std::printf("plain            %.3f ms per step\n", median(plain));
  auto [p_lo, p_hi] = range(profile_ratio);
  std::printf("--profile        %.3f ms per step, %+.1f%% against plain (rounds %+.1f..%+.1f%%)\n",
              median(profiled), median(profile_ratio) * 100, p_lo, p_hi);
  auto [c_lo, c_hi] = range(check_ratio);
  std::printf("--check-numerics %.3f ms per step, %+.1f%% against plain (rounds %+.1f..%+.1f%%)\n",
              median(checked), median(check_ratio) * 100, c_lo, c_hi);
}
