// tests/test_cuda_generated.cpp — every registered op run on a GPU vs the interpreter (forward
// and gradients in f64, f32, bf16, f16), generated from the registry; plus step replay and device
// errors
#include "backend_check.hpp"
#include "capture_stderr.hpp"
#include "dsl/sinter.hpp"
#include "env_override.hpp"
#include "op_test_registry.hpp"
#include "scatter_case.hpp"

#include "jit/backend/cuda/gpu_executable.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/passes/passes.hpp"
#include "jit/pipeline/pipeline.hpp"
#include "jit/profile/profiler.hpp"
#include "kernels/cuda/cudnn_attention.hpp"
#include "temp_dir.hpp"
#include "tests/support/nvptx_emulator.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <random>

namespace sinter::testing {
namespace {

KernelCache& gpu_cache() {
  static TempDir dir("sinter-cuda-ops");
  static KernelCache cache(dir.path);
  return cache;
}

/// Runs `optimized` on GPU 0 against the interpreter. SINTER_DUMP's stages are printed (the
/// tests read the launch plan: which path attention took, which epilogues cuBLASLt absorbed).
std::vector<HostTensor> run_on_gpu(const Graph& optimized, const std::vector<F64Tensor>& values) {
  CudaDevice& device = CudaDevice::get(0);
  CompileRun run("gpu test", false, DumpSelection::from_environment());
  GpuExecutable exe(prepare_for_nvptx(optimized, device.info().compute_capability, run), device,
                    gpu_cache(), run);
  std::vector<HostTensor> inputs = as_host(optimized, values);
  std::vector<const HostTensor*> pointers;
  for (const HostTensor& t : inputs)
    pointers.push_back(&t);
  std::vector<HostTensor> got(optimized.outputs().size());
  exe.run_into(pointers, got);
  return got;
}

void compare_on_gpu(const Graph& optimized, const std::vector<F64Tensor>& values,
                    double tolerance) {
  check_outputs_match(optimized, run_on_gpu(optimized, values), interpret(optimized, values),
                      tolerance);
}

void forward_on_gpu(OpId op) {
  for_each_forward_case(op, [](const Graph& g, const std::vector<F64Tensor>& values, DType t) {
    // Reductions combine in another order than the interpreter's (warp trees).
    compare_on_gpu(g, values, t == DType::f64 ? 1e-11 : backend_tolerance(t, false));
  });
}

void gradient_on_gpu(OpId op) {
  for_each_gradient_case(op, [](const Graph& g, const std::vector<F64Tensor>& values, DType t) {
    compare_on_gpu(g, values, t == DType::f64 ? 1e-9 : backend_tolerance(t, true));
  });
}

const bool forward_registered = register_op_tests<forward_on_gpu>(
    "on CUDA matches the interpreter (f64, f32, bf16, f16)", "[cuda][cuda-forward]");
const bool gradient_registered = register_op_tests<gradient_on_gpu>(
    "gradient on CUDA matches the interpreter", "[cuda][cuda-gradient]", differentiable_op);

/// Causal bf16 attention's loss and gradients on the GPU through each path SINTER_ATTENTION
/// names: cuDNN's fused SDPA (where cuDNN is installed; else the NVPTX kernels, saying why),
/// the NVPTX kernels, and the default's timed choice, each against the interpreter.
TEST_CASE("cuda: attention through cuDNN, the NVPTX kernels and the timed choice matches the "
          "interpreter",
          "[cuda]") {
  Graph g;
  TensorType type{DType::bf16, {2, 4, 192, 64}};
  Value q = input(g, "q", type), k = input(g, "k", type), v = input(g, "v", type);
  Value r = input(g, "r", type);
  g.add_output("loss", sum(attention(q, k, v, {.causal = true}) * r).id);
  Graph step =
      Pipeline::standard(AutodiffOptions{{"q", "k", "v"}, 0}).run(g, DumpSelection(""), std::cerr);
  std::vector<F64Tensor> values = random_values(step, 7);
  for (const char* path : {"cudnn", "nvptx", "fused"}) {
    INFO("SINTER_ATTENTION=" << path);
    EnvOverride attention_path("SINTER_ATTENTION", path);
    EnvOverride dump("SINTER_DUMP", "launch-plan");
    std::string plan =
        capture_stderr([&] { compare_on_gpu(step, values, backend_tolerance(DType::bf16, true)); });
    // Forced, cuDNN runs both kernels wherever it is installed (a GPU machine without it
    // checks the NVPTX kernels three times, and says so).
    bool on_cudnn = plan.find(" cudnn 2×4×192×192×64 bf16 causal") != std::string::npos;
    if (std::string(path) == "cudnn" && kernels::CudnnAttention::get())
      CHECK(on_cudnn);
    else if (std::string(path) == "nvptx")
      CHECK_FALSE(on_cudnn);
    if (!kernels::CudnnAttention::get())
      WARN("no cuDNN: " << kernels::CudnnAttention::unavailable_reason());
  }
}

/// A mixed-precision linear layer's gradients on the GPU: its bf16 weight-gradient GEMM and its
/// bias gradient, summed in bf16 as PyTorch's autocast sums it and widened to f32 (cuBLASLt's
/// BGRADA epilogue where cuBLASLt has it, else a column sum). Against the emulator, which runs the
/// same plan's kernels with every GEMM and column sum in float64 on the host: the GPU must agree
/// with it to a few bf16 roundings. Against the interpreter only loosely: the kernels keep a fused
/// loop's intermediates in f32 where the graph rounds each bf16 node, and the bias gradient sums
/// 256 of those differences (the emulator lies 0.052 from the interpreter there).
TEST_CASE("cuda: a bf16 linear layer's bias gradient matches the emulator", "[cuda]") {
  Graph step = mixed_precision_linear_step();
  std::vector<F64Tensor> values = random_values(step, 11);
  std::vector<HostTensor> got = run_on_gpu(step, values);
  std::vector<HostTensor> emulated = emulate_nvptx_step(step, as_host(step, values));
  std::vector<F64Tensor> want;
  for (const HostTensor& t : emulated)
    want.push_back(to_f64(t));
  check_outputs_match(step, got, want, 1e-2);
  check_outputs_match(step, got, interpret(step, values), 0.1);
}

/// A mixed-precision MLP with GELU (tanh) on the GPU: its first GEMM writes GELU's input and
/// output (cuBLASLt's GELU_AUX_BIAS), and the backward's GEMM of GELU's output gradient
/// multiplies by GELU's derivative at that input (DGELU), where the emulator runs the plan's own
/// loop kernels for both: cuBLASLt adds, activates and differentiates in f32 on the unrounded
/// product and rounds once, so they agree to a few bf16 roundings.
TEST_CASE("cuda: a bf16 MLP's GELU and its gradient as cuBLASLt epilogues match the emulator",
          "[cuda]") {
  Graph step = mixed_precision_gelu_mlp_step();
  std::vector<F64Tensor> values = random_values(step, 17);
  EnvOverride dump("SINTER_DUMP", "launch-plan");
  std::vector<HostTensor> got;
  std::string plan = capture_stderr([&] { got = run_on_gpu(step, values); });
  INFO(plan);
  CHECK(plan.find("epilogue gelu_aux_bias") != std::string::npos);
  CHECK(plan.find("epilogue gelu_gradient") != std::string::npos);
  std::vector<HostTensor> emulated = emulate_nvptx_step(step, as_host(step, values));
  std::vector<F64Tensor> want;
  for (const HostTensor& t : emulated)
    want.push_back(to_f64(t));
  check_outputs_match(step, got, want, 2e-2);
}

/// Forward-only bf16 layers (a distillation teacher's MLP): the bf16 product, a bf16 or f32
/// bias widened or narrowed to the sum's type, GELU in f32 or bf16, the result narrowed back, all
/// of it cuBLASLt's GELU_BIAS epilogue, which adds and activates in f32 on the f32 product and
/// rounds once: so the reference is that, each GEMM in f32 with the bias and GELU after it and
/// one rounding to bf16 (the graph itself rounds the product, the bias and the sum first: 0.011
/// from it). Each layer takes inputs of its own: fed one into the other, the second GEMM would
/// multiply the first one's roundings.
TEST_CASE("cuda: bf16 GEMMs with a mixed-precision bias and GELU as cuBLASLt's epilogue match "
          "one rounding of the f32 result",
          "[cuda]") {
  auto layers = [](bool rounded_once) {
    Graph g;
    Value x = input(g, "x", {DType::bf16, {64, 96}});
    Value w1 = input(g, "w1", {DType::bf16, {96, 128}});
    Value b1 = input(g, "b1", {DType::bf16, {128}});
    Value h = input(g, "h", {DType::bf16, {64, 128}});
    Value w2 = input(g, "w2", {DType::bf16, {128, 64}});
    Value b2 = input(g, "b2", {DType::f32, {64}});
    auto f32 = [](Value v) { return cast(v, DType::f32); };
    if (rounded_once) {
      g.add_output("y1", cast(gelu_tanh(matmul(f32(x), f32(w1)) + f32(b1)), DType::bf16).id);
      g.add_output("y2", cast(gelu_tanh(matmul(f32(h), f32(w2)) + b2), DType::bf16).id);
    } else {
      Value z = f32(reshape(matmul(x, w1), {4, 16, 128})) + f32(b1);
      g.add_output("y1", reshape(cast(gelu_tanh(z), DType::bf16), {64, 128}).id);
      g.add_output("y2", gelu_tanh(matmul(h, w2) + cast(b2, DType::bf16)).id);
    }
    return Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr);
  };
  Graph step = layers(false);
  std::vector<F64Tensor> values = random_values(step, 13);
  EnvOverride dump("SINTER_DUMP", "launch-plan");
  std::vector<HostTensor> got;
  std::string plan = capture_stderr([&] { got = run_on_gpu(step, values); });
  INFO(plan);
  check_outputs_match(step, got, interpret(layers(true), values),
                      backend_tolerance(DType::bf16, false));
  std::size_t epilogues = 0;
  for (std::size_t at = plan.find("epilogue gelu_bias"); at != std::string::npos;
       at = plan.find("epilogue gelu_bias", at + 1))
    ++epilogues;
  CHECK(epilogues == 2);
}

/// A two-layer MLP's loss and gradients: GEMMs (cuBLASLt, transposed operands), bias
/// broadcasts, reductions, softmax cross-entropy.
Graph mlp_gradients(int64_t batch) {
  Graph g;
  Value x = input(g, "x", {DType::f32, {batch, 64}});
  Value w1 = input(g, "w1", {DType::f32, {64, 128}});
  Value b1 = input(g, "b1", {DType::f32, {128}});
  Value w2 = input(g, "w2", {DType::f32, {128, 10}});
  Value labels = input(g, "labels", {DType::i32, {batch}});
  Value h = relu(matmul(x, w1) + b1);
  g.add_output("loss", cross_entropy_mean(matmul(h, w2), labels).id);
  return Pipeline::standard(AutodiffOptions{{"w1", "b1", "w2"}, 0})
      .run(g, DumpSelection(""), std::cerr);
}

std::vector<F64Tensor> mlp_values(const Graph& g) {
  std::mt19937_64 rng(3);
  std::vector<F64Tensor> values;
  for (const NamedValue& in : g.inputs()) {
    TensorType t = g.type(in.id);
    TestOperand spec{t.dtype, t.shape};
    if (in.name == "labels") spec.lo = 0, spec.hi = 10; // classes 0..9
    values.push_back(random_operand(spec, rng));
  }
  return values;
}

/// The MLP step's graph, its inputs and what the CPU backend computes from them.
struct MlpCase {
  Graph g = mlp_gradients(256);
  std::vector<HostTensor> inputs = as_host(g, mlp_values(g));
  std::vector<const HostTensor*> pointers;
  std::vector<HostTensor> want;
  MlpCase() {
    for (const HostTensor& t : inputs)
      pointers.push_back(&t);
    want = CompiledGraph(g, std::nullopt, Backend::cpu).run(inputs);
  }
};

TEST_CASE("cuda: under SINTER_DETERMINISTIC=1 a scatter gives the sums in position order, bit for "
          "bit, on every run; a bf16 scatter does in every mode",
          "[cuda]") {
  for (DType t : {DType::f32, DType::bf16}) {
    INFO(dtype_name(t));
    EnvOverride deterministic("SINTER_DETERMINISTIC",
                              t == DType::f32 ? std::optional<std::string>("1") : std::nullopt);
    ScatterCase c(5000, 96, 300, t); // about 17 updates a row, 40 index tiles
    std::vector<F64Tensor> values;
    for (const HostTensor& in : c.inputs)
      values.push_back(to_f64(in));
    HostTensor want = c.in_order();
    for (int run = 0; run < 3; ++run) {
      INFO("run " << run);
      CHECK(same_bits(run_on_gpu(c.graph, values)[0], want));
    }
  }
}

TEST_CASE("cuda: column reductions at GPT-2's shapes, 16 bytes of columns a lane and split over "
          "row groups, match the interpreter (bias gradients, sibling sums, maxima)",
          "[cuda]") {
  for (auto [t, shape] :
       {std::pair{DType::bf16, Shape{8192, 768}}, std::pair{DType::bf16, Shape{8, 1024, 3072}},
        std::pair{DType::f32, Shape{8192, 768}}, std::pair{DType::bf16, Shape{512, 16, 768}}}) {
    INFO(dtype_name(t) << " rank " << shape.size() << " last " << shape.back());
    Graph g;
    Value x = input(g, "x", {t, shape});
    Value y = input(g, "y", {t, shape});
    std::vector<int64_t> rows(shape.size() - 1);
    for (std::size_t i = 0; i < rows.size(); ++i)
      rows[i] = static_cast<int64_t>(i);
    // Sums of squares (no cancellation, so a relative tolerance holds), a widened bias
    // gradient and a maximum.
    g.add_output("sum_xx", emit(OpId::reduce_sum, {x * x}, Attrs{.ints = rows}).id);
    g.add_output("sum_yy", emit(OpId::reduce_sum, {y * y}, Attrs{.ints = rows}).id);
    g.add_output("db", emit(OpId::reduce_sum, {cast(x, DType::f32)}, Attrs{.ints = rows}).id);
    g.add_output("max", emit(OpId::reduce_max, {y}, Attrs{.ints = rows}).id);
    std::vector<F64Tensor> values = random_values(g, 7);
    check_outputs_match(g, run_on_gpu(g, values), interpret(g, values),
                        t == DType::f32 ? 1e-4 : backend_tolerance(t, false));
  }
}

TEST_CASE("cuda: a language model head whose bias rides on its GEMM as the epilogue: the loss and "
          "its gradients match the interpreter",
          "[cuda]") {
  constexpr int64_t classes = 4096;
  Graph g = lm_head_gradients(4, 8, 64, classes);
  std::vector<F64Tensor> values = random_values(g, 21);
  for (std::size_t i = 0; i < g.inputs().size(); ++i)
    if (g.type(g.inputs()[i].id).dtype == DType::i32)
      for (std::size_t k = 0; k < values[i].data.size(); ++k)
        values[i].data[k] = static_cast<double>((k * 977) % classes);
  EnvOverride dump("SINTER_DUMP", "launch-plan");
  std::string plan = capture_stderr([&] {
    check_outputs_match(g, run_on_gpu(g, values), interpret(g, values),
                        backend_tolerance(DType::bf16, true));
  });
  INFO(plan);
  // cuBLASLt took the bias (the null cuBLASLt too: the [null-gpu] plans say so).
  CHECK(plan.find("epilogue bias: kernel") != std::string::npos);
}

TEST_CASE("cuda: an MLP's gradients match the CPU backend, also when replayed as a CUDA graph",
          "[cuda]") {
  MlpCase mlp;
  const Graph& g = mlp.g;
  const auto& [inputs, pointers, want] = std::tie(mlp.inputs, mlp.pointers, mlp.want);
  GpuExecutable gpu(g, CudaDevice::get(0), gpu_cache());
  CHECK(gpu.report().kernels > 0);
  for (int run = 0; run < 4; ++run) { // runs 3 and 4 replay a CUDA graph
    INFO("run " << run);
    std::vector<HostTensor> got(g.outputs().size());
    gpu.run_into(pointers, got);
    CHECK(gpu.uses_graph() == (run >= 2));
    CHECK(gpu.last_step_device_ms() > 0);
    for (std::size_t i = 0; i < got.size(); ++i)
      CHECK(max_relative_difference(to_f64(got[i]), to_f64(want[i])) <= 1e-4);
  }
  // Through the API: the same results with the device named.
  CompiledGraph through_api(g, std::nullopt, Device(Backend::cuda, 0));
  std::vector<HostTensor> again = through_api.run(inputs);
  for (std::size_t i = 0; i < again.size(); ++i)
    CHECK(max_relative_difference(to_f64(again[i]), to_f64(want[i])) <= 1e-4);
}

TEST_CASE("cuda: a profiled step times every launch by events, on the cuda stream track, against "
          "the GPU's measured peak",
          "[cuda]") {
  MlpCase mlp;
  const Graph& g = mlp.g;
  const auto& [pointers, want] = std::tie(mlp.pointers, mlp.want);
  GpuExecutable gpu(g, CudaDevice::get(0), gpu_cache());
  testing::TempDir dir("sinter-cuda-profile");
  profile::start(dir.path, {.print = false});
  constexpr int runs = 5;
  for (int run = 0; run < runs; ++run) {
    std::vector<HostTensor> got(g.outputs().size());
    gpu.run_into(pointers, got);
    CHECK_FALSE(gpu.uses_graph()); // profiled runs launch kernel by kernel
    for (std::size_t i = 0; i < got.size(); ++i)
      CHECK(max_relative_difference(to_f64(got[i]), to_f64(want[i])) <= 1e-4);
  }
  profile::Summary s = profile::stop();
  INFO(s.text());
  CHECK(s.peak.how.rfind("cuda (", 0) == 0);
  CHECK(s.peak.bytes_per_second > 1e11); // any datacentre GPU copies faster than 100 GB/s
  CHECK(s.peak.flops_per_second > 1e12); // and multiplies faster than 1 TFLOP/s
  std::size_t timed = 0;
  for (const profile::KernelRow& k : s.kernels) {
    if (k.calls == 0) continue; // an epilogue absorbed into its GEMM
    ++timed;
    CHECK(k.calls == runs);
    CHECK(k.seconds > 0);
    CHECK(k.achieved > 0);
    CHECK(k.achieved < 1.5);
  }
  CHECK(timed == gpu.report().kernels); // every launch, each once per run
  std::ifstream trace(dir.path / "trace.json");
  std::string text((std::istreambuf_iterator<char>(trace)), std::istreambuf_iterator<char>());
  CHECK(text.find("\"cuda stream\"") != std::string::npos);
}

TEST_CASE("cuda: a loop that reads the loss after every step is called host-syncs; one that "
          "reads it at the end is not",
          "[cuda][cuda-host]") {
  struct Restore {
    Device was = default_device();
    ~Restore() { set_default_device(was); }
  } restore;
  set_default_device(Device(Backend::cuda, 0));
  auto profiled_loop = [](bool read_every_step) {
    Init init(4);
    Linear layer(32, 8, init);
    auto step = compile_step(
        layer, [](Linear& m, Var x, Var y) { return cross_entropy_loss(m(x), y); }, sgd{.lr = 0.1});
    std::mt19937 rng(1);
    std::normal_distribution<double> normal;
    std::vector<double> xs(64 * 32), ys(64);
    for (double& v : xs)
      v = normal(rng);
    for (std::size_t i = 0; i < ys.size(); ++i)
      ys[i] = static_cast<double>(i % 8);
    HostTensor x = HostTensor::from_doubles(DType::f32, {64, 32}, xs);
    HostTensor y = HostTensor::from_doubles(DType::i32, {64}, ys);
    testing::TempDir dir("sinter-cuda-syncs");
    profile::start(dir.path, {.print = false});
    LossHandle last;
    for (int i = 0; i < 30; ++i) {
      last = step(x, y).loss;
      if (read_every_step) CHECK(std::isfinite(last.value()));
    }
    CHECK(std::isfinite(last.value()));
    return profile::stop();
  };
  profile::Summary reading = profiled_loop(true);
  INFO(reading.text());
  CHECK(reading.device_reads >= 1.0);
  CHECK(std::any_of(reading.verdicts.begin(), reading.verdicts.end(),
                    [](const profile::Verdict& v) { return v.kind == "host-syncs"; }));
  profile::Summary quiet = profiled_loop(false);
  INFO(quiet.text());
  CHECK(quiet.device_reads < 0.5);
  CHECK(std::none_of(quiet.verdicts.begin(), quiet.verdicts.end(),
                     [](const profile::Verdict& v) { return v.kind == "host-syncs"; }));
}

TEST_CASE("cuda: carried values stay on the GPU between runs and are fetched on access, also "
          "when the step stores them over their inputs",
          "[cuda]") {
  for (bool donated : {false, true}) { // copied back after the step, or written over the input
    INFO((donated ? "stored over the input" : "copied back"));
    Graph g;
    Value x = input(g, "x", {DType::f32, {1000}});
    Value step = input(g, "step", {DType::f32, {}});
    g.add_output("new.x", (x * 2.0 + step).id);
    if (donated) g.donate(0, 0);
    GpuExecutable exe(g, CudaDevice::get(0), gpu_cache());
    std::vector<std::pair<std::size_t, std::size_t>> pairs{{0, 0}};
    exe.set_carried(pairs);
    HostTensor state = HostTensor::from_doubles(DType::f32, {1000}, std::vector<double>(1000, 1.0));
    std::vector<HostTensor> out(1);
    double expected = 1.0;
    for (int run = 0; run < 5; ++run) { // direct runs, then CUDA graph replays
      INFO("run " << run);
      HostTensor s = HostTensor::from_doubles(DType::f32, {}, std::vector<double>{double(run)});
      std::vector<const HostTensor*> in{&state, &s};
      exe.run_into(in, out);
      expected = expected * 2.0 + run;
      CHECK(out[0].deferred()); // nothing came back over PCIe yet
      std::swap(state, out[0]); // what a training step does with new parameters
      if (run == 2) CHECK(state.at(999) == expected); // a read fetches, and changes nothing
    }
    CHECK(state.at(0) == expected);
    // A host write is uploaded by the next run.
    state.set(0, 3.0);
    HostTensor zero = HostTensor::from_doubles(DType::f32, {}, std::vector<double>{0.0});
    std::vector<const HostTensor*> in{&state, &zero};
    exe.run_into(in, out);
    CHECK(out[0].at(0) == 6.0);
    CHECK(out[0].at(1) == expected * 2.0);
  }
}

TEST_CASE("cuda: a GPU that does not exist is refused by name", "[cuda][cuda-host]") {
  CHECK_THROWS_WITH(CudaDevice::get(999), Catch::Contains("no GPU cuda:999"));
}

} // namespace
} // namespace sinter::testing
