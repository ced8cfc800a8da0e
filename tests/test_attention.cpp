// tests/test_attention.cpp — fused attention against the decomposed composite (gradients on the
// interpreter and the CPU), and what the fused plan keeps out of memory
#include "backend_check.hpp"
#include "capture_stderr.hpp"
#include "env_override.hpp"

#include "jit/backend/cuda/attention_choice.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "kernels/cpu/cpu_attention.hpp"
#include "ptx_check.hpp"
#include "tests/support/nvptx_emulator.hpp"

#include <catch2/catch.hpp>

#include <random>

namespace sinter::testing {
namespace {

/// loss = sum(attention(q, k, v, mask?) · r) over one of the attention op's test cases.
struct AttentionLoss {
  std::vector<NamedOperand> operands;
  std::vector<std::string> wrt;
  Graph graph;
};

AttentionLoss attention_loss(const OpTestCase& c, DType precision, uint64_t seed) {
  std::mt19937_64 rng(seed);
  AttentionLoss loss;
  for (std::size_t i = 0; i < c.operands.size(); ++i) {
    TestOperand spec = c.operands[i];
    F64Tensor value = random_operand(spec, rng);
    if (spec.dtype == DType::f64) spec.dtype = precision;
    round_all(value, spec.dtype);
    std::string name = i < 3 ? std::string(1, "qkv"[i]) : "mask";
    if (i < 3) loss.wrt.push_back(name);
    loss.operands.push_back({name, TensorType{spec.dtype, spec.shape}, value});
  }
  Shape out = c.operands[0].shape;
  out.back() = c.operands[2].shape.back();
  F64Tensor r = random_operand(TestOperand{DType::f64, out}, rng);
  round_all(r, precision);
  loss.operands.push_back({"r", TensorType{precision, out}, r});
  loss.graph = build_graph(loss.operands, [&](Graph&, std::vector<Value>& in) {
    Value mask = in.size() == 5 ? in[3] : Value{};
    Value y = attention(in[0], in[1], in[2],
                        {.causal = c.attrs.flag, .scale = c.attrs.real, .mask = mask});
    return std::vector<Value>{sum(y * in.back())};
  });
  return loss;
}

Graph differentiated(const Graph& g, const std::vector<std::string>& wrt) {
  return Pipeline::standard(AutodiffOptions{wrt, 0}).run(g, DumpSelection(""), std::cerr);
}

/// The same loss with attention decomposed before autodiff: its gradient is autodiff's through
/// GEMMs and a softmax, not the fused backward's.
Graph differentiated_decomposed(const Graph& g, const std::vector<std::string>& wrt) {
  return differentiated(decompose(g, is_fused_attention), wrt);
}

TEST_CASE("attention: the fused backward matches autodiff through the decomposed forward",
          "[attention]") {
  auto cases = op_def(OpId::attention).test_cases();
  REQUIRE(cases.size() >= 3); // plain, causal, masked
  TestBackend backend("sinter-attention");
  for (std::size_t k = 0; k < cases.size(); ++k) {
    INFO("attention case " << k);
    AttentionLoss loss = attention_loss(cases[k], DType::f64, 31 + k);
    Graph fused = differentiated(loss.graph, loss.wrt);
    Graph decomposed = differentiated_decomposed(loss.graph, loss.wrt);
    REQUIRE(has_fused_attention(fused));
    REQUIRE_FALSE(has_fused_attention(decomposed));
    auto values = values_of(loss.operands);
    std::vector<F64Tensor> want = interpret(decomposed, values);
    std::vector<F64Tensor> interpreted = interpret(fused, values);
    CpuExecutable exe(fused, *backend.library, backend.pool);
    std::vector<HostTensor> compiled = exe.run(as_host(fused, values));
    REQUIRE(want.size() == 4); // the loss and three gradients
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO(fused.outputs()[i].name);
      CHECK(max_relative_difference(interpreted[i], want[i]) < 1e-12);
      CHECK(max_relative_difference(to_f64(compiled[i]), want[i]) < 1e-12);
    }
  }
}

TEST_CASE("attention: the CPU's fused kernels match the decomposition in f32, bf16 and f16",
          "[attention]") {
  auto cases = op_def(OpId::attention).test_cases();
  TestBackend backend("sinter-attention-narrow");
  for (DType precision : {DType::f32, DType::bf16, DType::f16})
    for (std::size_t k = 0; k < cases.size(); ++k) {
      INFO("attention case " << k << " in " << dtype_name(precision));
      AttentionLoss loss = attention_loss(cases[k], precision, 57 + k);
      Graph fused = differentiated(loss.graph, loss.wrt);
      Graph decomposed = differentiated_decomposed(loss.graph, loss.wrt);
      auto values = values_of(loss.operands);
      CpuExecutable fused_exe(fused, *backend.library, backend.pool);
      CpuExecutable decomposed_exe(decomposed, *backend.library, backend.pool);
      std::vector<HostTensor> got = fused_exe.run(as_host(fused, values));
      std::vector<HostTensor> want = decomposed_exe.run(as_host(decomposed, values));
      // The same loss in float64 on the same (rounded) values.
      std::vector<F64Tensor> exact = interpret(
          differentiated(attention_loss(cases[k], DType::f64, 57 + k).graph, loss.wrt), values);
      for (std::size_t i = 0; i < got.size(); ++i) {
        INFO(fused.outputs()[i].name);
        // The two round in different places (the decomposition also rounds the scores and the
        // weights to the low type), so each is held to the exact value: the fused kernels
        // within the backend's tolerance of it, or no further than the decomposition. (The
        // loss sums products of both signs: f16 case 1's decomposition is 1.6% off it, the
        // fused kernels 0.4%.)
        double fused_error = max_relative_difference(to_f64(got[i]), exact[i]);
        double decomposed_error = max_relative_difference(to_f64(want[i]), exact[i]);
        INFO("fused " << fused_error << ", decomposed " << decomposed_error);
        CHECK(fused_error <= std::max(backend_tolerance(precision, true), decomposed_error));
        CHECK(decomposed_error <= 2 * backend_tolerance(precision, true));
      }
    }
}

/// A causal self-attention step over [B, H, T, D] (q, k and v inputs), differentiated.
Graph causal_step(int64_t t, DType dtype = DType::f32, int64_t head_dim = 16) {
  Graph g;
  TensorType type{dtype, {2, 2, t, head_dim}};
  Value q = input(g, "q", type), k = input(g, "k", type), v = input(g, "v", type);
  Value r = input(g, "r", type);
  g.add_output("loss", sum(attention(q, k, v, {.causal = true}) * r).id);
  return differentiated(g, {"q", "k", "v"});
}

TEST_CASE("attention: one forward and one backward kernel, and no [T, T] buffer", "[attention]") {
  constexpr int64_t t = 64;
  Graph step = causal_step(t);
  FusionPlan plan = fuse(step);
  std::vector<const Kernel*> attention_kernels;
  for (const Kernel& kernel : plan.kernels)
    if (kernel.kind == KernelKind::attention) attention_kernels.push_back(&kernel);
  INFO(plan.print());
  REQUIRE(attention_kernels.size() == 2);
  CHECK(attention_kernels[0]->outputs().size() == 2); // o and the row log-sum-exp
  CHECK(attention_kernels[1]->outputs().size() == 3); // dq, dk, dv
  for (ValueId id = 0; id < step.size(); ++id) {
    const Shape& s = step.type(id).shape;
    bool square = s.size() >= 2 && s[s.size() - 1] == t && s[s.size() - 2] == t;
    INFO("%" << id << " " << to_string(step.type(id)));
    CHECK_FALSE((plan.materialized[id] && square));
  }
  // On a GPU, f32 attention is decomposed (the fused CUDA kernels run on bf16/f16 tensor
  // cores), and says why.
  NvptxAttentionChoice choice;
  Graph gpu = for_nvptx(step, 90, &choice);
  CHECK_FALSE(has_fused_attention(gpu));
  CHECK(choice.fused == 0);
  CHECK(choice.decomposed == 4); // the forward and the gradients of q, k and v
  CHECK_THAT(choice.why, Catch::Contains("bf16 or f16"));
}

/// A masked attention step with dims that are no multiple of the mma tiles, differentiated.
Graph masked_step(DType dtype) {
  Graph g;
  Value q = input(g, "q", {dtype, {3, 70, 20}}), k = input(g, "k", {dtype, {3, 75, 20}});
  Value v = input(g, "v", {dtype, {3, 75, 9}}), r = input(g, "r", {dtype, {3, 70, 9}});
  Value mask = input(g, "mask", {DType::boolean, {70, 75}});
  g.add_output("loss", sum(attention(q, k, v, {.scale = 0.3, .mask = mask}) * r).id);
  return differentiated(g, {"q", "k", "v"});
}

TEST_CASE("attention: bf16 and f16 run as one fused forward and one backward kernel on CUDA "
          "tensor cores (sm_80, sm_90)",
          "[attention][ptx]") {
  static std::optional<std::filesystem::path> ptxas = find_ptxas();
  REQUIRE(ptxas);
  TempDir dir("sinter-attention-ptx");
  for (DType t : {DType::bf16, DType::f16})
    for (bool masked : {false, true}) {
      INFO(dtype_name(t) << (masked ? " masked" : " causal"));
      Graph step = masked ? masked_step(t) : causal_step(64, t);
      NvptxAttentionChoice choice;
      Graph gpu = for_nvptx(step, 80, &choice);
      CHECK(choice.fused == 4);
      CHECK(choice.decomposed == 0);
      FusionPlan plan = fuse(gpu, gpu_fusion_options);
      std::vector<std::size_t> attention_kernels;
      for (std::size_t i = 0; i < plan.kernels.size(); ++i)
        if (plan.kernels[i].kind == KernelKind::attention) attention_kernels.push_back(i);
      REQUIRE(attention_kernels.size() == 2);
      for (std::size_t i : attention_kernels) {
        GpuLaunch launch = gpu_launch(gpu, plan.kernels[i]);
        CHECK(launch.strategy == GpuStrategy::attention);
        CHECK(launch.threads == 128);
        for (int capability : {80, 90}) {
          NvptxTarget& target = nvptx_target(capability);
          std::string ptx = target.compile(plan, plan.kernels[i], "attention");
          INFO(target.arch() << ":\n" << ptx);
          std::string mma = std::string("mma.sync.aligned.m16n8k16.row.col.f32.") +
                            (t == DType::bf16 ? "bf16.bf16" : "f16.f16") + ".f32";
          CHECK(ptx.find(mma) != std::string::npos);
          CHECK(ptx.find("bar.sync") != std::string::npos);
          CHECK(ptx.find(".local") == std::string::npos); // accumulators stay in registers
          // Rows of whole 16-byte pieces (the causal step's d = 16, not the masked one's 20)
          // reach the shared tiles 16 bytes at a time, by cp.async; B operands come from them
          // through ldmatrix, transposed where k runs down the tile's columns.
          CHECK((ptx.find("cp.async.cg.shared.global") != std::string::npos) == !masked);
          CHECK(ptx.find("cp.async.wait_group 0") != std::string::npos);
          CHECK(ptx.find("ldmatrix.sync.aligned.m8n8.x4.shared.b16") != std::string::npos);
          CHECK(ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") != std::string::npos);
          // Weights round to 16 bits two at a time (so do even-width results: the masked
          // step's dv = 9 stores its elements one by one), and e^x is one MUFU.EX2: without
          // .ftz ptxas adds a compare and two multiplies to every exponential.
          std::string pair = t == DType::bf16 ? "cvt.rn.bf16x2.f32" : "cvt.rn.f16x2.f32";
          std::string single = t == DType::bf16 ? "cvt.rn.bf16.f32" : "cvt.rn.f16.f32";
          CHECK(ptx.find(pair) != std::string::npos);
          CHECK((ptx.find(single) == std::string::npos) == !masked);
          CHECK(ptx.find("ex2.approx.ftz.f32") != std::string::npos);
          CHECK(ptx.find("ex2.approx.f32") == std::string::npos);
          PtxasResult assembled = run_ptxas(*ptxas, ptx, target.arch(), dir.path);
          INFO("ptxas: " << assembled.log);
          CHECK(assembled.ok);
        }
      }
      // The forward kernel covers every query block of every slice; the backward every key
      // block (dK, dV) and every query block (dQ).
      const Shape& q = gpu.type(gpu.inputs()[0].id).shape;
      const Shape& k = gpu.type(gpu.inputs()[1].id).shape;
      int64_t slices = numel(Shape(q.begin(), q.end() - 2));
      int64_t query_blocks = (q[q.size() - 2] + 63) / 64, key_blocks = (k[k.size() - 2] + 63) / 64;
      CHECK(gpu_launch(gpu, plan.kernels[attention_kernels[0]]).items == slices * query_blocks);
      CHECK(gpu_launch(gpu, plan.kernels[attention_kernels[1]]).items ==
            slices * (query_blocks + key_blocks));
      // Older GPUs (no bf16 mma.sync) decompose, and say why.
      NvptxAttentionChoice turing;
      CHECK_FALSE(has_fused_attention(for_nvptx(step, 75, &turing)));
      CHECK(turing.decomposed == 4);
      CHECK_THAT(turing.why, Catch::Contains("sm_80"));
    }
}

TEST_CASE("attention: each fused CUDA kernel's cuDNN form names its buffers, or says why cuDNN "
          "cannot take it",
          "[attention][cudnn]") {
  Graph gpu = for_nvptx(causal_step(64, DType::bf16), 90);
  FusionPlan plan = fuse(gpu, gpu_fusion_options);
  std::vector<const Kernel*> attention_kernels;
  for (const Kernel& kernel : plan.kernels)
    if (kernel.kind == KernelKind::attention) attention_kernels.push_back(&kernel);
  REQUIRE(attention_kernels.size() == 2);
  using Role = CudnnAttentionStep::Role;
  auto forward = cudnn_attention_step(plan, *attention_kernels[0], 90);
  REQUIRE(std::holds_alternative<CudnnAttentionStep>(forward));
  const CudnnAttentionStep& f = std::get<CudnnAttentionStep>(forward);
  CHECK(f.shape.describe() == "2×2×64×64×16 bf16 causal"); // [B, H] of q's [2, 2, 64, 16]
  CHECK(f.shape.scale == Approx(0.25));
  CHECK(f.shape.saves_lse); // training: the backward reads the log-sum-exp
  const Node& root = gpu.node(attention_kernels[0]->root);
  CHECK(f.nodes[Role::q] == root.inputs[0]);
  CHECK(f.nodes[Role::k] == root.inputs[1]);
  CHECK(f.nodes[Role::v] == root.inputs[2]);
  CHECK(gpu.node(*f.nodes[Role::o]).op == OpId::fused_attention);
  CHECK(gpu.node(*f.nodes[Role::lse]).op == OpId::fused_attention_lse);
  CHECK_FALSE(f.nodes[Role::dq]);
  auto backward = cudnn_attention_step(plan, *attention_kernels[1], 90);
  REQUIRE(std::holds_alternative<CudnnAttentionStep>(backward));
  const CudnnAttentionStep& b = std::get<CudnnAttentionStep>(backward);
  CHECK(b.shape.backward);
  CHECK(b.nodes[Role::o] == f.nodes[Role::o]);
  CHECK(b.nodes[Role::lse] == f.nodes[Role::lse]);
  for (Role role : {Role::dq, Role::dk, Role::dv}) {
    REQUIRE(b.nodes[role]);
    CHECK(gpu.node(*b.nodes[role]).attrs.ints[0] == static_cast<int64_t>(role - Role::dq));
  }
  // The memory plan counts the backward's f32 dq accumulator and do·o rows where cuDNN may run.
  std::size_t bound = kernels::CudnnAttention::get() ? 2 * 2 * 64 * 16 * 4 + 2 * 2 * 64 * 4 : 0;
  CHECK(cudnn_attention_workspace_bound(plan, 90) == bound);
  {
    EnvOverride nvptx("SINTER_ATTENTION", "nvptx");
    CHECK(cudnn_attention_workspace_bound(plan, 90) == 0);
  }
  // Too old a GPU, or a boolean mask: the NVPTX kernels, with the reason.
  auto turing = cudnn_attention_step(plan, *attention_kernels[0], 75);
  REQUIRE(std::holds_alternative<std::string>(turing));
  CHECK_THAT(std::get<std::string>(turing), Catch::Contains("sm_80"));
  Graph masked = for_nvptx(masked_step(DType::bf16), 90);
  FusionPlan masked_plan = fuse(masked, gpu_fusion_options);
  for (const Kernel& kernel : masked_plan.kernels)
    if (kernel.kind == KernelKind::attention) {
      auto why = cudnn_attention_step(masked_plan, kernel, 90);
      REQUIRE(std::holds_alternative<std::string>(why));
      CHECK_THAT(std::get<std::string>(why), Catch::Contains("boolean mask"));
    }
}

TEST_CASE("attention: the CUDA kernels double-buffer their tiles unless "
          "SINTER_ATTENTION_PIPELINE=0",
          "[attention][ptx]") {
  // The bytes of the kernel's static shared tiles, as its PTX declares them.
  auto shared_bytes = [](const char* pipeline) {
    EnvOverride stages("SINTER_ATTENTION_PIPELINE", pipeline);
    Graph gpu = for_nvptx(causal_step(64, DType::bf16), 80);
    FusionPlan plan = fuse(gpu, gpu_fusion_options);
    for (const Kernel& k : plan.kernels)
      if (k.kind == KernelKind::attention &&
          plan.graph->node(k.root).op == OpId::fused_attention_grad) {
        std::string ptx = nvptx_target(80).compile(plan, k, "attention");
        std::string declared = "block_tiles[";
        std::size_t at = ptx.find(declared);
        REQUIRE(at != std::string::npos);
        return std::stol(ptx.substr(at + declared.size()));
      }
    FAIL("no attention backward kernel");
    return 0l;
  };
  long pipelined = shared_bytes("1"), single = shared_bytes("0");
  CHECK(pipelined == 2 * single);
  CHECK(single > 0);
}

TEST_CASE("attention: the CUDA backward's dK/dV pass takes dO·O and the log-sum-exp from its "
          "tile copies where heads are whole pieces every thread copies alike",
          "[attention][ptx]") {
  static std::optional<std::filesystem::path> ptxas = find_ptxas();
  REQUIRE(ptxas);
  TempDir dir("sinter-attention-stats");
  // d = 64 (GPT-2's heads): 32 query rows of 8 pieces a tile, 2 per thread; d = 128: 16 rows
  // of 16 pieces. d = 16: 64 pieces for 128 threads, so the statistics still come from global
  // memory.
  for (int64_t head_dim : {64, 128, 16}) {
    INFO("head dim " << head_dim);
    Graph gpu = for_nvptx(causal_step(128, DType::bf16, head_dim), 80);
    FusionPlan plan = fuse(gpu, gpu_fusion_options);
    bool found = false;
    for (const Kernel& k : plan.kernels)
      if (k.kind == KernelKind::attention &&
          plan.graph->node(k.root).op == OpId::fused_attention_grad) {
        found = true;
        std::string ptx = nvptx_target(80).compile(plan, k, "attention");
        CHECK((ptx.find("cp.async.ca.shared.global") != std::string::npos) == (head_dim != 16));
        PtxasResult assembled = run_ptxas(*ptxas, ptx, nvptx_target(80).arch(), dir.path);
        INFO("ptxas: " << assembled.log);
        CHECK(assembled.ok);
      }
    CHECK(found);
  }
}

/// Runs `optimized` as a GPU of sm_80 would, in the NVPTX emulator: every kernel of its plan
/// must be a fused attention kernel.
std::vector<HostTensor> run_emulated(const Graph& optimized, const std::vector<F64Tensor>& values) {
  Graph gpu = for_nvptx(optimized, 80);
  REQUIRE(has_fused_attention(gpu));
  FusionPlan plan = fuse(gpu, gpu_fusion_options);
  INFO(plan.print());
  for (const Kernel& kernel : plan.kernels)
    REQUIRE(kernel.kind == KernelKind::attention);
  return emulate_nvptx_step(optimized, as_host(optimized, values));
}

/// The emulated CUDA kernels against the interpreter. P and dS go through the tensor cores in
/// bf16/f16 (as in flash attention), so the gradient tolerance applies to every output.
void check_emulated(const Graph& g, const std::vector<F64Tensor>& values, DType t) {
  check_outputs_match(g, run_emulated(g, values), interpret(g, values), backend_tolerance(t, true));
}

TEST_CASE("attention: the CUDA kernels, emulated on the CPU, match the interpreter on every "
          "registry case (bf16, f16)",
          "[attention][emulated]") {
  for (OpId op : {OpId::fused_attention, OpId::fused_attention_lse, OpId::fused_attention_grad})
    for_each_forward_case(op, [](const Graph& g, const std::vector<F64Tensor>& values, DType t) {
      if (t == DType::bf16 || t == DType::f16) check_emulated(g, values, t);
    });
}

TEST_CASE("attention: the CUDA kernels, emulated, span query blocks, key tiles and padding "
          "(causal; masked with odd dims)",
          "[attention][emulated]") {
  struct Problem {
    int64_t batch, tq, tk, d, dv;
    bool causal, masked;
    double scale;
  };
  // The third has whole 16-byte rows (d = dv = 64): its key and value tiles go 16 bytes at a
  // time, the last one past the keys' end zero-filled (100 keys: 64 + 36), and the dK/dV pass
  // takes each query tile's log-sum-exp and dO·O from its copies (32 rows of 8 pieces). The
  // fourth does so with 16-row query tiles of 16 pieces (d = 128), the last tile 8 rows short.
  // Tiles double-buffered (cp.async for the next while this one is used), then one at a time.
  for (const char* pipeline : {"1", "0"})
    for (Problem p : {Problem{2, 130, 130, 16, 24, true, false, 0.0},
                      Problem{3, 70, 75, 20, 9, false, true, 0.3},
                      Problem{2, 70, 100, 64, 64, false, false, 0.125},
                      Problem{1, 40, 40, 128, 128, true, false, 0.0}})
      for (DType t : {DType::bf16, DType::f16}) {
        EnvOverride stages("SINTER_ATTENTION_PIPELINE", pipeline);
        INFO("pipeline " << pipeline << ", " << dtype_name(t) << " tq " << p.tq << " tk " << p.tk
                         << (p.causal ? " causal" : " masked"));
        std::mt19937_64 rng(11);
        Shape q_shape{p.batch, p.tq, p.d}, k_shape{p.batch, p.tk, p.d},
            v_shape{p.batch, p.tk, p.dv}, o_shape{p.batch, p.tq, p.dv}, rows{p.batch, p.tq},
            mask_shape{p.tq, p.tk};
        Attrs attrs{.real = p.scale, .flag = p.causal};
        // Forward: o and the row log-sum-exp, one kernel.
        Graph forward;
        std::vector<Value> in{input(forward, "q", {t, q_shape}), input(forward, "k", {t, k_shape}),
                              input(forward, "v", {t, v_shape})};
        std::vector<F64Tensor> values{random_operand({DType::f64, q_shape}, rng),
                                      random_operand({DType::f64, k_shape}, rng),
                                      random_operand({DType::f64, v_shape}, rng)};
        if (p.masked) {
          in.push_back(input(forward, "mask", {DType::boolean, mask_shape}));
          values.push_back(random_operand({DType::boolean, mask_shape, 0, 2}, rng));
          for (int64_t j = 0; j < p.tk; ++j) // a row that attends to nothing averages v
            values.back().data[static_cast<std::size_t>(5 * p.tk + j)] = 0.0;
        }
        forward.add_output("o", emit(OpId::fused_attention, in, attrs).id);
        forward.add_output("lse", emit(OpId::fused_attention_lse, in, attrs).id);
        check_emulated(forward, values, t);
        // Backward: dq, dk and dv, one kernel, from o, the log-sum-exp and do.
        std::vector<F64Tensor> saved = interpret(forward, values);
        Graph backward;
        std::vector<Value> operands{
            input(backward, "q", {t, q_shape}),         input(backward, "k", {t, k_shape}),
            input(backward, "v", {t, v_shape}),         input(backward, "o", {t, o_shape}),
            input(backward, "lse", {DType::f32, rows}), input(backward, "do", {t, o_shape})};
        std::vector<F64Tensor> grad_values{values[0], values[1],
                                           values[2], saved[0],
                                           saved[1],  random_operand({DType::f64, o_shape}, rng)};
        if (p.masked) {
          operands.push_back(input(backward, "mask", {DType::boolean, mask_shape}));
          grad_values.push_back(values[3]);
        }
        for (int64_t which = 0; which < 3; ++which) {
          Attrs grad_attrs = attrs;
          grad_attrs.ints = {which};
          backward.add_output("d" + std::to_string(which),
                              emit(OpId::fused_attention_grad, operands, grad_attrs).id);
        }
        check_emulated(backward, grad_values, t);
      }
}

TEST_CASE("attention: SINTER_ATTENTION=decomposed decomposes on CUDA too", "[attention]") {
  EnvOverride env("SINTER_ATTENTION", "decomposed");
  NvptxAttentionChoice choice;
  CHECK_FALSE(has_fused_attention(for_nvptx(causal_step(32, DType::bf16), 90, &choice)));
  CHECK(choice.why == "SINTER_ATTENTION=decomposed");
}

/// What one build of the CPU kernel computes for a causal f32 problem: o, lse, dq, dk, dv.
std::vector<std::vector<float>> attention_kernel_results(const std::string& build) {
  kernels::use_attention_kernel_build(build);
  kernels::AttentionProblem p;
  p.batches = 3, p.tq = 11, p.tk = 11, p.d = 20, p.dv = 9, p.scale = 0.3, p.causal = true;
  auto n = [](int64_t x) { return static_cast<std::size_t>(x); };
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  auto random = [&](int64_t count) {
    std::vector<float> x(n(count));
    for (float& e : x)
      e = normal(rng);
    return x;
  };
  std::vector<float> q = random(p.batches * p.tq * p.d), k = random(p.batches * p.tk * p.d),
                     v = random(p.batches * p.tk * p.dv), d_o = random(p.batches * p.tq * p.dv);
  std::vector<float> o(d_o.size()), lse(n(p.batches * p.tq)), dq(q.size()), dk(k.size()),
      dv(v.size());
  kernels::attention_forward(p, {q.data(), k.data(), v.data(), o.data(), lse.data()}, 0,
                             p.batches * p.tq);
  kernels::attention_backward(p,
                              {q.data(), k.data(), v.data(), o.data(), d_o.data(), lse.data(),
                               dq.data(), dk.data(), dv.data()},
                              0, p.batches);
  return {o, lse, dq, dk, dv};
}

TEST_CASE("attention: every CPU build of the kernel this processor runs agrees", "[attention]") {
  const std::string chosen = kernels::attention_kernel_build();
  std::vector<std::string> builds = kernels::attention_kernel_builds();
  REQUIRE(builds.front() == chosen); // the best one runs by default
  REQUIRE(builds.back() == "baseline");
  auto want = attention_kernel_results(builds.back());
  for (const std::string& build : builds) {
    INFO("build " << build);
    auto got = attention_kernel_results(build);
    for (std::size_t i = 0; i < want.size(); ++i)
      for (std::size_t e = 0; e < want[i].size(); ++e)
        REQUIRE_THAT(got[i][e], Catch::Matchers::WithinAbs(want[i][e], 1e-4));
  }
  CHECK_THROWS_WITH(kernels::use_attention_kernel_build("sse9"),
                    Catch::Contains("no CPU attention build 'sse9'") &&
                        Catch::Contains("baseline"));
  kernels::use_attention_kernel_build(chosen);
}

TEST_CASE("attention: the op lowers to the fused primitive", "[attention]") {
  Graph g;
  Value q = input(g, "q", {DType::f32, {1, 4, 8}});
  Value y = attention(q, q, q);
  g.add_output("y", y.id);
  Graph optimized = Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr);
  CHECK(has_fused_attention(optimized));
}

TEST_CASE("attention: SINTER_ATTENTION=decomposed runs the decomposition on the CPU, saying so",
          "[attention]") {
  auto attention_kernels = [](const CompiledGraph& compiled) {
    std::size_t n = 0;
    for (const Kernel& k : compiled.fusion_plan()->kernels)
      n += k.kind == KernelKind::attention;
    return n;
  };
  Graph step = causal_step(8);
  {
    EnvOverride fused("SINTER_ATTENTION", std::nullopt);
    CHECK(attention_kernels(CompiledGraph(step, std::nullopt, Device(Backend::cpu))) == 2);
  }
  EnvOverride decomposed("SINTER_ATTENTION", "decomposed");
  std::optional<CompiledGraph> compiled;
  std::string said =
      capture_stderr([&] { compiled.emplace(step, std::nullopt, Device(Backend::cpu)); });
  CHECK(attention_kernels(*compiled) == 0);
  // Said once per process; no other test asks for the decomposition.
  CHECK(said.find("sinter: attention on cpu: decomposed") != std::string::npos);
  EnvOverride bad("SINTER_ATTENTION", "flash");
  CHECK_THROWS_WITH(CompiledGraph(step, std::nullopt, Device(Backend::cpu)),
                    Catch::Contains("fused, cudnn, nvptx or decomposed"));
}

} // namespace
} // namespace sinter::testing
