// tests/bench/ptx_compile.cpp — cold code-generation time of one training step's kernels, CPU
// objects vs NVPTX PTX (sm_80, sm_90), on any machine (no GPU needed)
//
// The step: MLP 784-1024-1024-10 (ReLU), batch 256, mean softmax cross-entropy, gradients of
// every weight and bias (the mlp_step benchmark's graph). Prints one line:
//   kernels=<generated kernels> gemms=<n> cpu_s=<LLVM x86 O3 + object> sm80_s=<PTX> sm90_s=<PTX>
//   ptx_kb=<PTX text for sm_90>
// Build: ninja -C build tests/bench/ptx_compile
#include "jit/backend/cpu/cpu_target.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/pipeline/pipeline.hpp"
#include "ops/value.hpp"

#include <chrono>
#include <cstdio>
#include <exception>
#include <iostream>

using namespace sinter;

int main() {
  try {
    Graph g;
    Value x = input(g, "x", {DType::f32, {256, 784}});
    Value labels = input(g, "labels", {DType::i64, {256}});
    Value w1 = input(g, "w1", {DType::f32, {784, 1024}}), b1 = input(g, "b1", {DType::f32, {1024}});
    Value w2 = input(g, "w2", {DType::f32, {1024, 1024}}),
          b2 = input(g, "b2", {DType::f32, {1024}});
    Value w3 = input(g, "w3", {DType::f32, {1024, 10}}), b3 = input(g, "b3", {DType::f32, {10}});
    Value h = relu(matmul(relu(matmul(x, w1) + b1), w2) + b2);
    g.add_output("loss", cross_entropy_mean(matmul(h, w3) + b3, labels).id);
    Graph step = Pipeline::standard(AutodiffOptions{{"w1", "b1", "w2", "b2", "w3", "b3"}, 0})
                     .run(g, DumpSelection(""), std::cerr);
    FusionPlan plan = fuse(step);
    std::size_t kernels = 0, gemms = 0, ptx_bytes = 0;
    auto seconds_for = [&](auto compile_one) {
      auto start = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < plan.kernels.size(); ++i)
        if (plan.kernels[i].kind != KernelKind::gemm)
          compile_one(plan.kernels[i], "k" + std::to_string(i));
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    for (const Kernel& k : plan.kernels)
      (k.kind == KernelKind::gemm ? gemms : kernels)++;
    CpuTarget cpu;
    double cpu_s =
        seconds_for([&](const Kernel& k, const std::string& name) { cpu.compile(plan, k, name); });
    NvptxTarget sm80(80), sm90(90);
    double sm80_s =
        seconds_for([&](const Kernel& k, const std::string& name) { sm80.compile(plan, k, name); });
    double sm90_s = seconds_for([&](const Kernel& k, const std::string& name) {
      ptx_bytes += sm90.compile(plan, k, name).size();
    });
    std::printf("kernels=%zu gemms=%zu cpu_s=%.3f sm80_s=%.3f sm90_s=%.3f ptx_kb=%.1f\n", kernels,
                gemms, cpu_s, sm80_s, sm90_s, static_cast<double>(ptx_bytes) / 1024);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ptx_compile: %s\n", e.what());
    return 1;
  }
}
