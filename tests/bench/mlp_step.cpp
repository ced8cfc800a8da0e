// tests/bench/mlp_step.cpp — sinter's side of the MLP training-step benchmark (tests/bench/)
//
// One step: the mean softmax cross-entropy of a 784-1024-1024-10 MLP (ReLU hidden layers,
// integer labels, float32, batch 256) and its gradients with respect to every weight and bias,
// via sinter::value_and_grad. `--small` shrinks it to 784-64-64-10, batch 16, 2 iterations.
// Inputs and parameters are the same deterministic pattern as tests/bench/peers.py, so the loss
// printed here matches the PyTorch and JAX peers.
//
// Prints one machine-readable line (read by tests/bench/report.py):
//   peer=sinter compile_s=<first call, s> median_step_s=<s> threads=<n> iters=<n> loss=<x>
// compile_s is the wall time of the first call: tracing, the pass pipeline, code generation
// (or loading it from SINTER_CACHE_DIR) and one step. `--threads N` sets SINTER_NUM_THREADS.
//
// Build: ninja -C build tests/bench/mlp_step   (tests/bench/run.sh does it and runs everything)
#include "bench_timing.hpp"
#include "dsl/sinter.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

using namespace sinter;

namespace {

constexpr std::size_t features = 784, classes = 10;

/// The loss of a features -> H -> H -> classes MLP; the batch size is left dynamic.
template <std::size_t H>
auto mlp_loss(Tensor<f32, dyn, features> x, Tensor<i64, dyn> labels, Tensor<f32, features, H> w1,
              Tensor<f32, H> b1, Tensor<f32, H, H> w2, Tensor<f32, H> b2,
              Tensor<f32, H, classes> w3, Tensor<f32, classes> b3) {
  Tensor<f32, dyn, H> h1 = [&] {
    scope s("mlp.fc1");
    return relu(matmul(x, w1) + b1);
  }();
  Tensor<f32, dyn, H> h2 = [&] {
    scope s("mlp.fc2");
    return relu(matmul(h1, w2) + b2);
  }();
  scope s("mlp.fc3");
  Tensor<f32, dyn, classes> logits = matmul(h2, w3) + b3;
  return cross_entropy_mean(logits, labels);
}

using bench::pattern;

struct Options : bench::StepFlags {
  Options() { warmup = iters = -1; } // -1: the default for the size
  bool small = false;
};

template <std::size_t H> int run(const Options& opt, int64_t batch) {
  const std::vector<int64_t> widths{static_cast<int64_t>(features), static_cast<int64_t>(H),
                                    static_cast<int64_t>(H), static_cast<int64_t>(classes)};
  std::vector<HostTensor> args;
  args.push_back(pattern({batch, widths[0]}, 1.0, 0.0));
  std::vector<double> labels(static_cast<std::size_t>(batch));
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<double>((i * 7) % classes);
  args.push_back(HostTensor::from_doubles(DType::i64, {batch}, labels));
  for (std::size_t layer = 0; layer + 1 < widths.size(); ++layer) {
    int64_t fan_in = widths[layer], fan_out = widths[layer + 1];
    args.push_back(pattern({fan_in, fan_out}, 1.0 / std::sqrt(static_cast<double>(fan_in)),
                           1.0 + 2.0 * static_cast<double>(layer)));
    args.push_back(pattern({fan_out}, 0.1, 2.0 + 2.0 * static_cast<double>(layer)));
  }

  auto step =
      value_and_grad(mlp_loss<H>, {.names = {"x", "labels", "w1", "b1", "w2", "b2", "w3", "b3"},
                                   .wrt = {"w1", "b1", "w2", "b2", "w3", "b3"}});

  GradResult result;
  bench::StepTiming timing =
      bench::time_steps([&] { result = step.call(args); }, opt.warmup, opt.iters);
  double first_call = timing.first_call_s, median = timing.median_step_s;
  if (result.grads.size() != 6) {
    std::fprintf(stderr, "mlp_step: expected 6 gradients, got %zu\n", result.grads.size());
    return 1;
  }
  if (step.trace_count() != 1) {
    std::fprintf(stderr, "mlp_step: traced %zu times, expected once\n", step.trace_count());
    return 1;
  }
  std::printf("peer=sinter compile_s=%.4g median_step_s=%.6g threads=%d iters=%d loss=%.6f\n",
              first_call, median, opt.threads, opt.iters, result.value.at(0));
  return 0;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--threads N] [--warmup N] [--iters N] [--small]\n"
               "  one MLP training step (784-1024-1024-10, batch 256; --small: 784-64-64-10,\n"
               "  batch 16) via sinter::value_and_grad; prints first-call and median step time\n",
               argv0);
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::optional<bool> step_flag = bench::read_step_flag(argc, argv, i, opt);
    bool ok = step_flag ? *step_flag : std::string_view(argv[i]) == "--small";
    if (ok && !step_flag) opt.small = true;
    if (!ok) return usage(argv[0]);
  }
  if (opt.warmup < 0) opt.warmup = opt.small ? 0 : 3;
  if (opt.iters < 0) opt.iters = opt.small ? 2 : 10;
  // The runtime reads its thread count from here when it starts (before the first call).
  setenv("SINTER_NUM_THREADS", std::to_string(opt.threads).c_str(), 1);
  try {
    return opt.small ? run<64>(opt, 16) : run<1024>(opt, 256);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_step: %s\n", e.what());
    return 1;
  }
}
