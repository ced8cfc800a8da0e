// tests/test_null_gpu.cpp — the CUDA backend's host side on the null driver (SINTER_NULL_GPU=1):
// what a step allocates against its plan, launches per step, staging, and the driver's refusals
#include "capture_stderr.hpp"
#include "dsl/sinter.hpp"
#include "env_override.hpp"
#include "jit/backend/cpu/thread_pool.hpp"
#include "jit/backend/cuda/cuda_device.hpp"
#include "jit/backend/cuda/cuda_driver.hpp"
#include "jit/backend/cuda/gpu_executable.hpp"
#include "jit/profile/gpu_peak.hpp"
#include "jit/profile/numerics_check.hpp"
#include "jit/train/max_batch.hpp"
#include "null_gpu_helpers.hpp"
#include "ptx_check.hpp"
#include "support/null_cuda/null_gpu.h"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <random>
#include <regex>
#include <string>

namespace sinter::testing {
namespace {

TEST_CASE("null gpu: sinter loads the null driver and names it as such", "[null-gpu]") {
  const cuda::Driver* d = cuda::driver();
  REQUIRE(d);
  CHECK(d->is_null());
  CHECK_THAT(d->null_description, Catch::Contains("null driver") && Catch::Contains("sm_90"));
  std::vector<cuda::DeviceInfo> gpus = d->devices();
  REQUIRE(gpus.size() == 1);
  CHECK_THAT(gpus[0].name, Catch::Contains("H100") && Catch::Contains("[null driver]"));
  CHECK(gpus[0].compute_capability == 90);
  CHECK(gpus[0].multiprocessors == 132);
  CHECK(gpus[0].total_memory == std::size_t{81559} << 20);
}

TEST_CASE("null gpu: a training step allocates what it planned, holds no pinned copy of its "
          "state, and is one CUDA graph per step",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  constexpr int64_t width = 512, batch = 64;
  Init init(7);
  Mlp model(width, init);
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  std::vector<double> xs(batch * width), ys(batch);
  for (double& v : xs)
    v = normal(rng);
  for (std::size_t i = 0; i < ys.size(); ++i)
    ys[i] = static_cast<double>(i % 10);
  HostTensor x = HostTensor::from_doubles(DType::f32, {batch, width}, xs);
  HostTensor y = HostTensor::from_doubles(DType::i32, {batch}, ys);
  const int64_t batch_bytes = static_cast<int64_t>(x.byte_size() + y.byte_size());

  CudaDevice::get(0).gemm_workspace(); // the device's, made once: not the step's
  reset_counters();
  const NullGpuCounters before = counters();
  auto step = compile_step(
      model, [](Mlp& m, Var in, Var labels) { return cross_entropy_loss(m(in), labels); },
      adamw{.lr = 1e-3});
  HostTensor example[] = {x, y};
  StepMemory planned = step.plan_memory(example);
  for (int i = 0; i < 3; ++i) // two direct runs, then the first graph launch
    step(x, y);
  const NullGpuCounters compiled = counters();
  TrainStep::ResidentBytes resident = step.runtime().resident_bytes();
  INFO("planned arena " << planned.arena << " inputs " << planned.inputs << " outputs "
                        << planned.outputs << "; state " << resident.parameters << " + "
                        << resident.optimizer_state);

  // Device memory: what the plan says, at its peak too: no transient second copy of the
  // parameters or optimizer state. The plan counts each of its allocations in whole 2 MiB
  // pages, the null driver only those of a page or more: they differ by less than a page per
  // allocation, and the step makes a handful: the arena, the outputs, the first set's inputs
  // (made for the compile, then again in two once the carried ones are known) and the
  // second set's.
  const int64_t allocated = static_cast<int64_t>(compiled.device_bytes - before.device_bytes);
  const int64_t peak = static_cast<int64_t>(compiled.device_peak_bytes - before.device_bytes);
  const auto allocations =
      static_cast<int64_t>(compiled.device_allocations - before.device_allocations);
  CHECK(allocations <= 6);
  CHECK(planned.workspace == 0); // the device has its GEMM workspace already
  const int64_t buffers = planned.total() - planned.runtime;
  CHECK(allocated <= buffers);
  CHECK(peak <= buffers);
  CHECK(allocated > buffers - allocations * static_cast<int64_t>(device_page_bytes));
  // The kernels' images fit the plan's allowance for them.
  CHECK(compiled.module_bytes > before.module_bytes);
  CHECK(static_cast<int64_t>(compiled.module_bytes - before.module_bytes) <= planned.runtime);

  // Pinned memory: the batch and the loss, in each of two input sets; never the state.
  const auto pinned = static_cast<int64_t>(compiled.pinned_peak_bytes - before.pinned_bytes);
  CHECK(pinned <= 2 * (batch_bytes + 4096));
  CHECK(pinned < resident.parameters);
  // The parameters went up once, straight from the host tensors; AdamW's fresh moments (zeros
  // nobody wrote) were cleared on the device, never copied.
  CHECK(static_cast<int64_t>(compiled.bytes_host_to_device_pageable) >= resident.parameters);
  CHECK(static_cast<int64_t>(compiled.bytes_host_to_device_pageable) < resident.parameters + 4096);
  CHECK(resident.optimizer_state >= 2 * resident.parameters);
  CHECK(compiled.memsets - before.memsets >= 2);

  // Steady state: one graph launch per step, the batch up and nothing else, no host syncs.
  reset_counters();
  constexpr int steps = 4;
  LossHandle last;
  for (int i = 0; i < steps; ++i)
    last = step(x, y).loss;
  const NullGpuCounters steady = counters();
  CHECK(steady.graph_launches == steps);
  CHECK(steady.kernel_launches + steady.gemms + steady.memsets + steady.copies_device_to_device +
            steady.copies_device_to_host ==
        steady.graph_nodes_launched);
  CHECK(steady.last_graph_nodes * steps == steady.graph_nodes_launched);
  CHECK(steady.last_graph_nodes > 0);
  // Every kernel of the plan once per step (GEMMs through cuBLASLt), nothing more.
  const CompileReport& report = step.runtime().program().compile_report();
  CHECK(steady.kernel_launches + steady.gemms == steps * report.kernels);
  CHECK(steady.gemms > 0);
  // Up: the batch and the step's scalars (step number, learning rate), all pinned.
  CHECK(steady.bytes_host_to_device >= static_cast<uint64_t>(steps * batch_bytes));
  CHECK(steady.bytes_host_to_device <= static_cast<uint64_t>(steps * (batch_bytes + 64)));
  CHECK(steady.bytes_host_to_device_pageable == 0);
  // The host waits only for the step two before (whose input set it reuses), never for the
  // step it just enqueued.
  CHECK(steady.host_syncs <= steps);
  CHECK(last.value() == 0.0); // nothing ran: what comes back is zeros
  CHECK(counters().host_syncs >= 1);
}

TEST_CASE("null gpu: a resident batch goes up once, and again only when it changes", "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  Init init(8);
  Mlp model(64, init);
  std::vector<double> xs(32 * 64, 0.25), ys(32, 3.0);
  HostTensor x = HostTensor::from_doubles(DType::f32, {32, 64}, xs);
  HostTensor y = HostTensor::from_doubles(DType::i32, {32}, ys);
  const auto batch_bytes = static_cast<uint64_t>(x.byte_size() + y.byte_size());
  auto step = compile_step(
      model, [](Mlp& m, Var in, Var labels) { return cross_entropy_loss(m(in), labels); },
      sgd{.lr = 0.1}, {.resident_batch = true});
  for (int i = 0; i < 3; ++i)
    step(x, y);
  reset_counters();
  for (int i = 0; i < 4; ++i)
    step(x, y);
  NullGpuCounters same = counters();
  CHECK(same.graph_launches == 4);
  CHECK(same.bytes_host_to_device < batch_bytes); // the step's scalars only
  x.set(0, 1.0);                                  // a write: the next step sends it
  reset_counters();
  step(x, y);
  CHECK(counters().bytes_host_to_device_pageable == x.byte_size());
  // Without the option the batch goes up every step, from pinned staging.
  auto plain = compile_step(
      model, [](Mlp& m, Var in, Var labels) { return cross_entropy_loss(m(in), labels); },
      sgd{.lr = 0.1});
  for (int i = 0; i < 3; ++i)
    plain(x, y);
  reset_counters();
  for (int i = 0; i < 4; ++i)
    plain(x, y);
  CHECK(counters().bytes_host_to_device >= 4 * batch_bytes);
  CHECK(counters().bytes_host_to_device_pageable == 0);
}

TEST_CASE("null gpu: a step recompiled for another batch size reuses the kernels that take "
          "their row count as a parameter",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  // Kernels a recompile for batch 56 makes anew (compiled now or read from the disk cache)
  // after batch 40, with a width no other test uses (nothing loaded in this process matches).
  auto new_kernels = [](int64_t width) {
    Init init(9);
    Mlp model(width, init);
    auto step = compile_step(
        model, [](Mlp& m, Var in, Var labels) { return cross_entropy_loss(m(in), labels); },
        adamw{.lr = 1e-3});
    std::size_t made = 0;
    for (int64_t batch : {40, 56}) {
      std::vector<double> xs(static_cast<std::size_t>(batch * width), 0.5);
      std::vector<double> ys(static_cast<std::size_t>(batch), 1.0);
      HostTensor x = HostTensor::from_doubles(DType::f32, {batch, width}, xs);
      HostTensor y = HostTensor::from_doubles(DType::i32, {batch}, ys);
      for (int i = 0; i < 3; ++i) // direct runs, then graph launches: the driver checks each
        step(x, y);
      const CompileReport& report = step.runtime().program().compile_report();
      made = report.compiled + report.from_disk;
      INFO("batch " << batch << ": " << report.generated << " generated, " << report.compiled
                    << " compiled, " << report.from_disk << " from disk");
      CHECK(report.generated > 4);
    }
    return made;
  };
  std::size_t with_parameter = 0, without = 0;
  {
    EnvOverride rows("SINTER_ROWS_PARAMETER", "1");
    with_parameter = new_kernels(88);
  }
  {
    EnvOverride rows("SINTER_ROWS_PARAMETER", "0");
    without = new_kernels(104);
  }
  INFO("kernels made anew for batch 56: " << with_parameter << " with the rows parameter, "
                                          << without << " without");
  // What remains is the loss gradient, which scales by 1 / batch.
  CHECK(with_parameter <= 2);
  CHECK(without >= with_parameter + 2);
}

TEST_CASE("null gpu: a step recompiled for another shape bucket reuses the kernels that take "
          "the sequence length as a parameter",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  // Kernels each call makes anew (compiled now or read from the disk cache) with buckets of 10,
  // 12 and 20 tokens, called at 20, then 12, then 10; a width no other test uses, no size that
  // equals another (so no kernel's shape changes for a coincidence of sizes: 8 tokens would
  // equal the 8 rows of the layernorm backward's row groups, and those groups would simplify
  // to the batch's rows), and at least 64 rows (8 × 8), so that the column sums keep their
  // launch strategy.
  auto new_kernels = [](int64_t width) {
    Init init(5);
    GPT model(GPTConfig{.vocab = 32, .context = 24, .dim = width, .depth = 1, .heads = 2}, init);
    std::vector<int64_t> sizes{10, 12, 20};
    auto step = compile_step(
        model, [](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next); },
        adamw{.lr = 1e-3},
        {.batch_names = {"ids", "next"}, .buckets = {{"ids", sizes}, {"next", sizes}}});
    std::vector<std::size_t> made;
    for (int64_t length : {20, 12, 10}) {
      std::vector<double> ids(static_cast<std::size_t>(8 * length), 3.0);
      HostTensor x = HostTensor::from_doubles(DType::i32, {8, length}, ids);
      step(x, x);
      const CompileReport& report = step.runtime().program().compile_report();
      made.push_back(report.compiled + report.from_disk);
      INFO("length " << length << ": " << report.generated << " generated, " << report.compiled
                     << " compiled, " << report.from_disk << " from disk");
      CHECK(report.generated > 10);
    }
    return made;
  };
  std::vector<std::size_t> with_parameter, without;
  {
    EnvOverride rows("SINTER_ROWS_PARAMETER", "1");
    with_parameter = new_kernels(36);
  }
  {
    EnvOverride rows("SINTER_ROWS_PARAMETER", "0");
    without = new_kernels(44);
  }
  INFO("kernels made anew at 20, 12, 10 tokens: "
       << with_parameter[0] << ", " << with_parameter[1] << ", " << with_parameter[2]
       << " with the parameter; " << without[0] << ", " << without[1] << ", " << without[2]
       << " without");
  // What remains depends on the length beyond sizes: the loss gradient's 1 / tokens.
  CHECK(with_parameter[1] <= 3);
  CHECK(with_parameter[2] <= 3);
  CHECK(without[1] >= with_parameter[1] + 8);
  CHECK(without[2] >= with_parameter[2] + 8);
}

TEST_CASE("null gpu: a GPT's bf16 step sums each bias gradient in bf16 as its weight "
          "gradient's GEMM epilogue, its qkv bias rides on the projection, and GELU and its "
          "gradient on the MLP's GEMMs",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  EnvOverride dump("SINTER_DUMP", "launch-plan");
  Init init(3);
  constexpr int64_t depth = 2, batch = 2, context = 32, vocab = 64;
  GPT model(GPTConfig{.vocab = vocab, .context = context, .dim = 64, .depth = depth, .heads = 2},
            init);
  auto step = compile_step(model, [](GPT& m, Var x, Var y) { return cross_entropy_mean(m(x), y); },
                           adamw{}, {.batch_names = {"ids", "next"}, .amp = amp::bf16});
  std::vector<double> ids(batch * context);
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<double>(i * 7 % vocab);
  HostTensor x = HostTensor::from_doubles(DType::i32, {batch, context}, ids);
  std::string text = capture_stderr([&] { step(x, x); });
  INFO(text);
  // Each block's qkv bias: attention reads the heads from the projection's output
  // (SINTER_ATTENTION_VIEWS), so the bias is all the loop after the GEMM does.
  std::regex bias(R"(\n  epilogue bias: kernel [0-9]+ into the GEMM of kernel [0-9]+)");
  CHECK(std::distance(std::sregex_iterator(text.begin(), text.end(), bias),
                      std::sregex_iterator()) == depth);
  // And the 4 · depth + 1 bias gradients (qkv, projection, the MLP's two, the head) ride on
  // their weight gradients' GEMMs as BGRADA: autocast rounds each bias to bf16 before its
  // broadcast, as PyTorch's linear does, so the gradient is a bf16 sum of the bf16 dY — the
  // type cuBLASLt's bias-gradient vector has (the output's), where the H200's had no algorithm
  // for an f32 one (2026-11-29).
  std::regex gradient(
      R"(\n  epilogue bias_gradient: kernel [0-9]+ into the GEMM of kernel [0-9]+)");
  CHECK(std::distance(std::sregex_iterator(text.begin(), text.end(), gradient),
                      std::sregex_iterator()) == 4 * depth + 1);
  // Each MLP's GELU: its GEMM writes the pre-activation and GELU's output (GELU_AUX_BIAS), and
  // in the backward the GEMM of GELU's output gradient multiplies by GELU's derivative at that
  // pre-activation (DGELU); the null cuBLASLt checks the aux matrix against its allocation.
  std::regex gelu_aux(
      R"(\n  epilogue gelu_aux_bias: kernel [0-9]+ into the GEMM of kernel [0-9]+)");
  CHECK(std::distance(std::sregex_iterator(text.begin(), text.end(), gelu_aux),
                      std::sregex_iterator()) == depth);
  std::regex gelu_gradient(
      R"(\n  epilogue gelu_gradient: kernel [0-9]+ into the GEMM of kernel [0-9]+)");
  CHECK(std::distance(std::sregex_iterator(text.begin(), text.end(), gelu_gradient),
                      std::sregex_iterator()) == depth);
  std::regex absorbed(R"(\n  launch [0-9]+ kernel [0-9]+ gemm [^\n]* with epilogue)");
  CHECK(std::distance(std::sregex_iterator(text.begin(), text.end(), absorbed),
                      std::sregex_iterator()) == depth + 4 * depth + 1 + 2 * depth);
  // The null cuBLASLt checked each bias pointer against its vector's extent, and ran them.
  CHECK(counters().gemms > 0);
}

TEST_CASE("null gpu: SINTER_DUMP=plan predicts each launch on the device and ends with the "
          "step's sum",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  EnvOverride dump("SINTER_DUMP", "plan");
  Init init(12);
  Mlp model(120, init);
  auto step = compile_step(
      model, [](Mlp& m, Var in, Var labels) { return cross_entropy_loss(m(in), labels); },
      adamw{.lr = 1e-3});
  std::vector<double> xs(64 * 120, 0.5), ys(64, 2.0);
  HostTensor x = HostTensor::from_doubles(DType::f32, {64, 120}, xs);
  HostTensor y = HostTensor::from_doubles(DType::i32, {64}, ys);
  std::string text = capture_stderr([&] { step(x, y); });
  std::smatch end;
  REQUIRE(std::regex_search(
      text, end,
      std::regex(
          R"(\npredicted_step_ms=([0-9.]+) device=NVIDIA H100 80GB HBM3 \[null driver\]\n)")));
  double predicted_ms = std::stod(end[1]);
  // One line per launch, each with its time, what bounds it and its fields; they add up.
  std::regex launch_line(R"((?:^|\n) +([0-9.]+) us  [a-z ]+ +k[0-9]+ [^\n]*  \[kind=[^\n]*\])");
  double sum_us = 0;
  std::size_t launches = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), launch_line), done; it != done; ++it) {
    sum_us += std::stod((*it)[1]);
    ++launches;
  }
  const CompileReport& report = step.runtime().program().compile_report();
  CHECK(launches == report.kernels);
  CHECK(predicted_ms > 0);
  CHECK(sum_us / 1e3 == Approx(predicted_ms).epsilon(0.01));
}

/// Weights just over a 2 MiB page each (1024 x 520 floats): allocated alone, each would take
/// two pages of the device.
struct PageSized {
  BOOST_HANA_DEFINE_STRUCT(PageSized, (Linear, a), (Linear, b), (Linear, c), (Linear, d));
  explicit PageSized(Init& init)
      : a(1024, 520, init), b(520, 1024, init), c(1024, 520, init), d(520, 1024, init) {}
  Var operator()(Var x) { return d(relu(c(relu(b(relu(a(x))))))); }
};

TEST_CASE("null gpu: a step's buffers share a few allocations, so the driver's whole pages stay "
          "within the plan, and a carried value outliving its step holds no batch",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  CudaDevice::get(0).gemm_workspace();
  Init init(5);
  PageSized model(init);
  constexpr int64_t rows = 4096; // a 16 MiB batch
  HostTensor x(DType::f32, {rows, 1024}), y(DType::f32, {rows, 1024});
  reset_counters();
  const NullGpuCounters before = counters();
  int64_t state_bytes = 0, planned_buffers = 0;
  {
    auto step = compile_step(
        model, [](PageSized& m, Var in, Var target) { return mse_loss(m(in), target); },
        adamw{.lr = 1e-3});
    HostTensor example[] = {x, y};
    StepMemory planned = step.plan_memory(example);
    planned_buffers = planned.total() - planned.runtime - planned.workspace;
    for (int i = 0; i < 3; ++i)
      step(x, y);
    const NullGpuCounters ran = counters();
    TrainStep::ResidentBytes resident = step.runtime().resident_bytes();
    state_bytes = resident.parameters + resident.optimizer_state;
    INFO("planned " << planned_buffers << ", state " << state_bytes);
    // 16 weights and moments of 2.03 MiB alone would take 16 pages more than they hold.
    CHECK(static_cast<int64_t>(ran.device_peak_bytes - before.device_bytes) <= planned_buffers);
    CHECK(ran.device_allocations - before.device_allocations <= 6);
  }
  // The step is gone; the model's parameters still hold its last values, deferred on the
  // device, in the carried inputs' allocation only.
  const auto held = static_cast<int64_t>(counters().device_bytes - before.device_bytes);
  INFO("held " << held << " after the step, state " << state_bytes);
  CHECK(held >= state_bytes);
  CHECK(held < state_bytes + static_cast<int64_t>(device_page_bytes));
  CHECK(model.a.weight.value.to_doubles().size() == 1024 * 520); // still readable
}

/// Rows of 8192 x 1024 floats: 32 MiB per sample in (each input set holds one), about 230 MiB
/// per sample planned.
struct Wide {
  BOOST_HANA_DEFINE_STRUCT(Wide, (Linear, in), (Linear, out));
  explicit Wide(Init& init) : in(1024, 1024, init), out(1024, 8, init) {}
  Var operator()(Var x) { return out(relu(in(x))); }
};

TEST_CASE("null gpu: the largest batch max_batch predicts runs, and one more runs out of memory",
          "[null-gpu]") {
  DefaultDeviceCuda on_cuda;
  CudaDevice& gpu = CudaDevice::get(0);
  gpu.gemm_workspace();
  Init init(9);
  Wide model(init);
  auto loss = [](Wide& m, Var x, Var y) { return mse_loss(m(x), y); };
  HostTensor example[] = {HostTensor(DType::f32, {1, 8192, 1024}),
                          HostTensor(DType::f32, {1, 8192, 8})};
  // The batch in both input sets: the second set's buffers are made at the first run too.
  auto make_step = [&] { return compile_step(model, loss, sgd{.lr = 0.1}); };
  auto planning = make_step();
  auto peak = [&](int64_t b) { return planning.plan_memory(resized_batch(example, b)).total(); };
  // Free memory for the budget: half-way between the plans of 12 and 13 rows (the rest of the
  // device held by one allocation).
  constexpr int64_t target = 12;
  const int64_t budget = (peak(target) + peak(target + 1)) / 2;
  REQUIRE(peak(target + 1) - peak(target) > 2 * runtime_allowance_bytes);
  const cuda::Driver& d = cuda::require_driver();
  gpu.make_current();
  std::size_t free = 0, total = 0;
  d.check(d.cuMemGetInfo(&free, &total), "cuMemGetInfo");
  REQUIRE(static_cast<int64_t>(free) > budget);
  DeviceBuffer ballast(free - static_cast<std::size_t>(budget));
  MaxBatch fit = planning.max_batch(example, cuda_free_bytes());
  INFO(fit.line());
  CHECK(fit.batch == target);
  auto run_at = [&](int64_t rows) {
    std::vector<HostTensor> batch = resized_batch(example, rows);
    auto step = make_step();
    for (int i = 0; i < 3; ++i) // direct runs and the graph capture: everything allocated
      step(batch[0], batch[1]);
  };
  CHECK_NOTHROW(run_at(fit.batch));
  // Every allocation happens in the first run, where running out is explained: the plan, its
  // largest buffers and the batch that fits.
  CHECK_THROWS_WITH(run_at(fit.batch + 1), Catch::Contains("out of memory on cuda") &&
                                               Catch::Contains("planned peak") &&
                                               Catch::Contains("largest buffers"));
  // Out of memory, a step lets go of what its failed program holds: the report plans the batch
  // that fits against what is free for a retry, names sinter's share of the device, and the
  // same step then runs at that batch.
  auto retried = make_step();
  std::vector<HostTensor> too_large = resized_batch(example, fit.batch + 1);
  CHECK_THROWS_WITH(retried(too_large[0], too_large[1]),
                    Catch::Contains("largest batch that fits: " + std::to_string(target) + " ") &&
                        Catch::Contains("sinter's device buffers hold"));
  std::vector<HostTensor> fitting = resized_batch(example, fit.batch);
  CHECK_NOTHROW(retried(fitting[0], fitting[1]));
}

// With SINTER_NULL_GPU_COPIES=1 (the meson test null-gpu-copies) device memory holds what the
// copies put there: the host's data path (staging, input sets, carried values) end to end.

TEST_CASE("null gpu copies: inputs returned as outputs come back byte for byte, on both input "
          "sets and in CUDA graph replays",
          "[null-gpu-copies]") {
  TempDir dir("sinter-null-copies");
  KernelCache cache(dir.path);
  constexpr int64_t big = int64_t{5} << 20; // 20 MiB of f32: staged on several threads
  Graph g;
  Value x = input(g, "x", {DType::f32, {big}});
  Value y = input(g, "y", {DType::i32, {7}});
  g.add_output("x.back", x.id);
  g.add_output("y.back", y.id);
  GpuExecutable exe(g, CudaDevice::get(0), cache);
  ThreadPool pool(3);
  exe.stage_with(pool);
  std::vector<HostTensor> out(2);
  for (int run = 0; run < 5; ++run) { // direct runs, then graph replays on alternating sets
    INFO("run " << run);
    HostTensor xs(DType::f32, {big}), ys(DType::i32, {7});
    for (int64_t i = 0; i < big; i += 4099)
      xs.set(i, static_cast<double>(run * 1000 + i % 977));
    xs.set(big - 1, run + 0.5);
    for (int64_t i = 0; i < 7; ++i)
      ys.set(i, static_cast<double>(run * 10 + i));
    std::vector<const HostTensor*> in{&xs, &ys};
    exe.run_into(in, out);
    CHECK(std::memcmp(out[0].bytes().data(), std::as_const(xs).bytes().data(), xs.byte_size()) ==
          0);
    CHECK(out[1].at(6) == run * 10 + 6);
  }
  CHECK(exe.uses_graph());
}

TEST_CASE("null gpu copies: a carried value stays on the device, is fetched on access, and a "
          "host write goes up with the next run",
          "[null-gpu-copies]") {
  TempDir dir("sinter-null-carried");
  KernelCache cache(dir.path);
  Graph g;
  Value state = input(g, "state", {DType::f32, {4096}});
  g.add_output("new.state", state.id);
  GpuExecutable exe(g, CudaDevice::get(0), cache);
  std::vector<std::pair<std::size_t, std::size_t>> pairs{{0, 0}};
  exe.set_carried(pairs);
  HostTensor value = HostTensor::from_doubles(DType::f32, {4096}, std::vector<double>(4096, 2.5));
  std::vector<HostTensor> out(1);
  for (int run = 0; run < 4; ++run) {
    std::vector<const HostTensor*> in{&value};
    exe.run_into(in, out);
    CHECK(out[0].deferred());
    std::swap(value, out[0]); // as a training step keeps its new parameters
  }
  CHECK(value.at(4095) == 2.5); // fetched from the device
  value.set(7, -1.0);           // written on the host: uploaded by the next run
  std::vector<const HostTensor*> in{&value};
  exe.run_into(in, out);
  CHECK(out[0].at(7) == -1.0);
  CHECK(out[0].at(8) == 2.5);
}

TEST_CASE("null gpu: the profiler's peak probe fits in what a step at its largest batch leaves",
          "[null-gpu]") {
  CudaDevice& gpu = CudaDevice::get(0);
  gpu.make_current();
  const cuda::Driver& d = cuda::require_driver();
  std::size_t free = 0, total = 0;
  d.check(d.cuMemGetInfo(&free, &total), "cuMemGetInfo");
  const std::size_t left = std::size_t{100} << 20; // what a step at its largest batch left
  REQUIRE(free > left);
  DeviceBuffer ballast(free - left);
  profile::DevicePeak peak = measure_gpu_peak(gpu, kernels::Fp32Math::exact);
  INFO(peak.how);
  CHECK_THAT(peak.how,
             Catch::Contains("copies of 1 MiB to 4.00 MiB") && Catch::Contains("GEMMs of 1024^3"));
  CHECK(peak.bytes_per_second > 1e12); // the null H100's 2.95 TB/s, as its cost model has it
  CHECK(peak.flops_per_second > 1e14);
}

/// A kernel taking one global pointer, as LLVM's NVPTX backend declares it.
constexpr const char* one_pointer_ptx = R"(
.version 8.5
.target sm_90
.address_size 64
.visible .entry touch(
	.param .u64 .ptr .global .align 4 touch_param_0
)
{
	ret;
}
)";

TEST_CASE("null gpu: the driver refuses what a GPU would, and says why", "[null-gpu]") {
  const cuda::Driver& d = cuda::require_driver();
  CudaDevice& gpu = CudaDevice::get(0);
  gpu.make_current();
  auto message = [&](cuda::Result r, const char* call) -> std::string {
    try {
      d.check(r, call);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  };

  // More than the device has: out of memory, as sinter reports it.
  cuda::DevicePtr huge = 0;
  CHECK_THROWS_AS(d.check(d.cuMemAlloc(&huge, std::size_t{1} << 40), "cuMemAlloc"),
                  sinter::OutOfMemory);

  // A module, its kernel, and a launch whose pointer is outside every allocation.
  cuda::ModuleHandle module = nullptr;
  d.check(d.cuModuleLoadDataEx(&module, one_pointer_ptx, 0, nullptr, nullptr), "load");
  cuda::FunctionHandle missing = nullptr;
  CHECK_THAT(message(d.cuModuleGetFunction(&missing, module, "nope"), "cuModuleGetFunction"),
             Catch::Contains("CUDA_ERROR_NOT_FOUND") && Catch::Contains("no kernel nope"));
  cuda::FunctionHandle touch = nullptr;
  d.check(d.cuModuleGetFunction(&touch, module, "touch"), "cuModuleGetFunction");
  // PTX the assembler rejects is refused when loaded, as the driver's JIT refuses it.
  if (find_ptxas()) {
    std::string broken = std::string(one_pointer_ptx) + "\n.visible .entry bad() { bogus; }\n";
    cuda::ModuleHandle rejected = nullptr;
    CHECK_THAT(message(d.cuModuleLoadDataEx(&rejected, broken.c_str(), 0, nullptr, nullptr),
                       "cuModuleLoadDataEx"),
               Catch::Contains("CUDA_ERROR_INVALID_PTX") && Catch::Contains("assembler rejected"));
  }
  DeviceBuffer buffer(1024);
  cuda::DevicePtr inside = buffer.get() + 16, outside = buffer.get() + (std::size_t{1} << 30);
  void* good[] = {&inside};
  d.check(d.cuLaunchKernel(touch, 1, 1, 1, 32, 1, 1, 0, gpu.stream(), good, nullptr), "launch");
  void* bad[] = {&outside};
  CHECK_THAT(message(d.cuLaunchKernel(touch, 1, 1, 1, 32, 1, 1, 0, gpu.stream(), bad, nullptr),
                     "cuLaunchKernel"),
             Catch::Contains("CUDA_ERROR_ILLEGAL_ADDRESS") && Catch::Contains("parameter 0"));
  CHECK_THAT(message(d.cuLaunchKernel(touch, 1, 1, 1, 2048, 1, 1, 0, gpu.stream(), good, nullptr),
                     "cuLaunchKernel"),
             Catch::Contains("CUDA_ERROR_INVALID_VALUE"));
  // More than 48 KB of dynamic shared memory only once the function asked for it.
  constexpr unsigned row_cache = 100608;
  CHECK_THAT(
      message(d.cuLaunchKernel(touch, 1, 1, 1, 32, 1, 1, row_cache, gpu.stream(), good, nullptr),
              "cuLaunchKernel"),
      Catch::Contains("CUDA_ERROR_INVALID_VALUE") && Catch::Contains("cuFuncSetAttribute"));
  d.check(d.cuFuncSetAttribute(touch, cuda::function_max_dynamic_shared_bytes, row_cache),
          "cuFuncSetAttribute");
  d.check(d.cuLaunchKernel(touch, 1, 1, 1, 32, 1, 1, row_cache, gpu.stream(), good, nullptr),
          "launch with a row cache");

  // A copy past the end of a buffer.
  std::vector<std::byte> host(2048);
  CHECK_THAT(message(d.cuMemcpyHtoDAsync(buffer.get(), host.data(), host.size(), gpu.stream()),
                     "cuMemcpyHtoDAsync"),
             Catch::Contains("not inside one device allocation"));

  // Allocating while this thread captures a stream is refused and spoils the capture.
  d.check(d.cuStreamBeginCapture(gpu.stream(), cuda::stream_capture_thread_local), "capture");
  cuda::DevicePtr during = 0;
  CHECK_THAT(message(d.cuMemAlloc(&during, 256), "cuMemAlloc"),
             Catch::Contains("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"));
  cuda::GraphHandle graph = nullptr;
  CHECK_THAT(message(d.cuStreamEndCapture(gpu.stream(), &graph), "cuStreamEndCapture"),
             Catch::Contains("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"));
  d.check(d.cuModuleUnload(module), "cuModuleUnload");
}

// --check-numerics on cuda: the scan kernel (kernels/cuda/non_finite_scan.cpp) runs after each
// launch; the null driver runs it on its backed memory, and SINTER_NULL_GPU_FILL=nan makes every
// kernel's output NaN (kernels run nothing there), so what the check finds is known.
TEST_CASE("null gpu copies: --check-numerics on cuda scans each launch's outputs on the device "
          "and names the op, its model path, or the operand that arrived non-finite",
          "[null-gpu-copies]") {
  DefaultDeviceCuda on_cuda;
  auto f = jit([](Var x) -> Var {
    sinter::scope guarded("guard");
    return exp(x) * 2.0;
  });
  HostTensor ok(DType::f32, {300});
  for (int64_t i = 0; i < 300; ++i)
    ok.set(i, 0.01 * static_cast<double>(i));
  {
    // Memory as the kernels leave it on the null driver (untouched: zeros): nothing to find.
    set_check_numerics(true);
    CHECK_NOTHROW(f(ok));
    set_check_numerics(false);
  }
  EnvOverride nan_memory("SINTER_NULL_GPU_FILL", "nan");
  auto g = jit([](Var x) -> Var {
    sinter::scope guarded("guard");
    return exp(x) * 3.0; // another function: its buffers are allocated now, full of NaN
  });
  set_check_numerics(true);
  std::string what;
  try {
    g(ok);
  } catch (const NumericsError& e) {
    what = e.what();
  }
  INFO(what);
  CHECK_THAT(what, Catch::StartsWith("sinter: non-finite value (--check-numerics): `") &&
                       Catch::Contains(" at guard made a non-finite value from finite operands") &&
                       Catch::Contains("element 0"));
  // An operand that arrived holding inf is named instead of the op that read it.
  HostTensor poisoned = ok;
  poisoned.set(7, std::numeric_limits<double>::infinity());
  CHECK_THROWS_WITH(g(poisoned), Catch::Contains("input 'arg0' already held a non-finite value "
                                                 "(element 7)") &&
                                     Catch::Contains("the value came from outside the step"));
  set_check_numerics(false);
  CHECK_NOTHROW(g(ok)); // off: no scan, whatever the memory holds
}

} // namespace
} // namespace sinter::testing
