// tests/test_amp.cpp — mixed precision: the autocast pass's policy, regions, fp16 loss scaling
#include "dsl/sinter.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <optional>

using namespace sinter;

namespace {

HostTensor tensor(DType t, Shape shape, std::vector<double> values) {
  return HostTensor::from_doubles(t, std::move(shape), values);
}

/// The dtype of the first node of `op` in `g` (fails the test when there is none).
DType dtype_of_first(const Graph& g, OpId op) {
  for (ValueId id = 0; id < g.size(); ++id)
    if (g.node(id).op == op) return g.type(id).dtype;
  FAIL("no " << op_name(op) << " node in the graph");
  return DType::f64;
}

/// A linear layer, GELU, layernorm and a loss, as traced: the ops whose precision rules differ.
Graph small_network(bool fp32_region) {
  Graph g;
  Value x = input(g, "x", {DType::f32, {4, 8}});
  Value w = input(g, "w", {DType::f32, {8, 6}});
  Value b = input(g, "b", {DType::f32, {6}});
  Value gamma = input(g, "gamma", {DType::f32, {6}});
  Value beta = input(g, "beta", {DType::f32, {6}});
  Value labels = input(g, "labels", {DType::i32, {4}});
  if (fp32_region) g.push_precision(RegionPrecision::fp32);
  Value h = gelu_tanh(matmul(x, w) + b);
  if (fp32_region) g.pop_scope();
  Value loss = cross_entropy_mean(layernorm(h, gamma, beta), labels);
  g.add_output("loss", loss.id);
  g.add_output("hidden", h.id);
  return g;
}

} // namespace

TEST_CASE("autocast: GEMMs and the elementwise work after them go low, norms and losses stay f32",
          "[amp]") {
  for (DType low : {DType::bf16, DType::f16}) {
    INFO(dtype_name(low));
    Graph g = autocast(small_network(false), low);
    sinter::verify(g);
    CHECK(dtype_of_first(g, OpId::matmul) == low);
    CHECK(dtype_of_first(g, OpId::add) == low);       // the bias add follows the GEMM
    CHECK(dtype_of_first(g, OpId::gelu_tanh) == low); // so does the activation
    CHECK(dtype_of_first(g, OpId::layernorm) == DType::f32);
    CHECK(dtype_of_first(g, OpId::cross_entropy_mean) == DType::f32);
    // Inputs (master weights) and outputs keep their types.
    for (const NamedValue& in : g.inputs())
      CHECK(g.type(in.id).dtype == (in.name == "labels" ? DType::i32 : DType::f32));
    CHECK(g.type(g.outputs()[0].id).dtype == DType::f32);
    CHECK(g.type(g.outputs()[1].id) == TensorType{DType::f32, {4, 6}});
  }
}

TEST_CASE("autocast: the residual stream stays f32 where a low block output joins it, as in "
          "PyTorch's type promotion; a GEMM's bias and a constant join the GEMM's precision, "
          "another parameter does not",
          "[amp]") {
  for (DType low : {DType::bf16, DType::f16}) {
    INFO(dtype_name(low));
    Graph g;
    Value x = input(g, "x", {DType::f32, {4, 8}});
    Value w = input(g, "w", {DType::f32, {8, 8}});
    Value b = input(g, "b", {DType::f32, {8}});
    Value position = input(g, "position", {DType::f32, {4, 8}});
    Value stream = exp(x);                               // f32 work: the residual stream
    Value block = matmul(stream, w) + b;                 // low: a GEMM and its bias
    Value scaled = block * constant(g, 0.5, DType::f32); // low: a constant joins it
    Value out = stream + scaled;                         // f32: the stream meets a low output
    Value embedded = block + position; // f32: a parameter that is no GEMM's bias (ViT's positions)
    g.add_output("y", out.id);
    g.add_output("embedded", embedded.id);
    Graph cast = autocast(g, low);
    sinter::verify(cast);
    std::vector<DType> adds, muls;
    for (ValueId id = 0; id < cast.size(); ++id) {
      if (cast.node(id).op == OpId::add) adds.push_back(cast.type(id).dtype);
      if (cast.node(id).op == OpId::mul) muls.push_back(cast.type(id).dtype);
    }
    CHECK(adds == std::vector<DType>{low, DType::f32, DType::f32});
    CHECK(muls == std::vector<DType>{low});
    CHECK(dtype_of_first(cast, OpId::exp) == DType::f32);
  }
}

TEST_CASE("autocast: an amp::region(fp32) keeps its ops in f32, and f64 graphs are untouched",
          "[amp]") {
  Graph g = autocast(small_network(true), DType::bf16);
  CHECK(dtype_of_first(g, OpId::matmul) == DType::f32);
  CHECK(dtype_of_first(g, OpId::gelu_tanh) == DType::f32);

  Graph f64;
  Value a = input(f64, "a", {DType::f64, {3, 3}});
  f64.add_output("y", exp(matmul(a, a)).id);
  CHECK(autocast(f64, DType::bf16).print() == cse(f64).print());
  CHECK_THROWS_WITH(autocast(f64, DType::f32), Catch::Contains("bf16 or f16"));
}

TEST_CASE("the interpreter stores bf16 and f16 values as those types hold them", "[amp]") {
  CHECK(round_to_dtype(1.0 + 1.0 / 512, DType::bf16) == 1.0); // tie: to even
  CHECK(round_to_dtype(1.0 + 3.0 / 512, DType::bf16) == 1.0 + 4.0 / 512);
  CHECK(round_to_dtype(65519.0, DType::f16) == 65504.0);
  CHECK(std::isinf(round_to_dtype(65520.0, DType::f16)));              // beyond f16's range
  CHECK(round_to_dtype(3e-8, DType::f16) == std::ldexp(1.0, -25) * 2); // subnormal spacing 2^-24
  CHECK(std::isinf(round_to_dtype(-4e38, DType::bf16)));
}

namespace {

/// y = x · w: one weight vector, easy to follow through a skipped update.
struct Linear1 {
  BOOST_HANA_DEFINE_STRUCT(Linear1, (Parameter, w));
};

auto squared_error = [](Linear1& m, Var x, Var y) {
  Value err = sinter::matmul(x.value(), m.w.node()) - y.value();
  return Var(sinter::mean(err * err));
};

} // namespace

TEST_CASE("amp::region in a model's loss keeps its GEMM in f32 inside compile_step", "[amp]") {
  auto matmul_dtype = [](bool region) {
    Linear1 model{Parameter(tensor(DType::f32, {2, 1}, {0.5, -0.25}))};
    auto loss = [region](Linear1& m, Var x, Var y) {
      std::optional<amp::region> keep;
      if (region) keep.emplace(amp::fp32);
      Value err = sinter::matmul(x.value(), m.w.node()) - y.value();
      keep.reset();
      return Var(sinter::mean(err * err));
    };
    auto step = compile_step(model, loss, adamw{}, {.amp = amp::bf16});
    step(tensor(DType::f32, {2, 2}, {1, 2, 3, 4}), tensor(DType::f32, {2, 1}, {1, 0}));
    return dtype_of_first(step.runtime().program().graph(), OpId::matmul);
  };
  CHECK(matmul_dtype(false) == DType::bf16);
  CHECK(matmul_dtype(true) == DType::f32);
  CHECK_THROWS_AS(amp::region(amp::fp32), std::logic_error); // outside any trace
}

namespace {

/// Two MLPs in a row; the first may be kept in f32 by a region, as docs/amp.md's example does.
struct TwoMLPs {
  BOOST_HANA_DEFINE_STRUCT(TwoMLPs, (MLP, first), (MLP, second));
};

} // namespace

TEST_CASE("an amp::region around an MLP ends with it: the next MLP's GEMMs are low again",
          "[amp]") {
  Init init(3);
  TwoMLPs model{MLP({4, 8, 4}, init, Activation::gelu), MLP({4, 8, 2}, init, Activation::gelu)};
  auto loss = [](TwoMLPs& m, Var x, Var y) {
    Var h;
    {
      amp::region keep(amp::fp32);
      h = m.first(x);
    }
    Value err = m.second(h).value() - y.value();
    return Var(sinter::mean(err * err));
  };
  auto step = compile_step(model, loss, adamw{}, {.amp = amp::bf16});
  std::vector<double> xs(12, 0.5), ys(6, 0.25);
  step(tensor(DType::f32, {3, 4}, xs), tensor(DType::f32, {3, 2}, ys));
  const Graph& g = step.runtime().program().graph();
  int first = 0, second = 0;
  for (ValueId id = 0; id < g.size(); ++id) {
    if (g.node(id).op != OpId::matmul) continue;
    const std::string& path = g.scope_path(g.node(id).scope);
    INFO(path << ": " << to_string(g.type(id)));
    if (path.starts_with("first.") && !path.ends_with(".bwd")) {
      ++first;
      CHECK(g.type(id).dtype == DType::f32);
    } else if (path.starts_with("second.") && !path.ends_with(".bwd")) {
      ++second;
      CHECK(g.type(id).dtype == DType::bf16);
    }
  }
  CHECK(first == 2);
  CHECK(second == 2);
}

namespace {

/// Kernels that only cast (and move elements): what AMP must not add to a step.
std::vector<std::string> standalone_casts(const FusionPlan& plan) {
  std::vector<std::string> found;
  for (const Kernel& k : plan.kernels) {
    bool casts = false, only_moves = true;
    for (ValueId v : k.body) {
      OpId op = plan.graph->node(v).op;
      casts |= op == OpId::cast;
      only_moves &= op == OpId::cast || op_def(op).fusion == FusionCost::index_only ||
                    plan.graph->node(v).op == OpId::input;
    }
    if (k.kind == KernelKind::loop && casts && only_moves)
      found.push_back("%" + std::to_string(k.root) + " " + to_string(plan.graph->type(k.root)));
  }
  return found;
}

} // namespace

TEST_CASE("a bf16 GPT step has no kernel that only casts: casts join their neighbours", "[amp]") {
  for (AmpMode mode : {amp::bf16, amp::fp16}) {
    INFO(amp_name(mode));
    Init init(3);
    GPT model(GPTConfig{.vocab = 64, .context = 16, .dim = 32, .depth = 2, .heads = 2}, init);
    auto step = compile_step(
        model, [](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next); },
        adamw{.lr = 1e-3}, {.clip_grad_norm = 1.0, .amp = mode});
    std::vector<double> ids(4 * 16);
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<double>((i * 7) % 64);
    HostTensor x = tensor(DType::i64, {4, 16}, ids), y = x;
    double first = step(x, y).loss.value();
    const FusionPlan* plan = step.runtime().program().fusion_plan();
    REQUIRE(plan != nullptr);
    INFO(plan->print());
    CHECK(standalone_casts(*plan) == std::vector<std::string>{});
    // The GEMMs really run in the low precision, from working copies of the weights.
    std::size_t low_gemms = 0;
    for (const Kernel& k : plan->kernels)
      low_gemms += k.kind == KernelKind::gemm && plan->graph->type(k.root).dtype != DType::f32;
    CHECK(low_gemms > 0);
    // MultiHeadAttention runs fused, in the low precision: per block, one forward kernel (o
    // and the row log-sum-exp) and one backward kernel (dq, dk, dv).
    std::size_t attention_kernels = 0;
    for (const Kernel& k : plan->kernels)
      if (k.kind == KernelKind::attention) {
        ++attention_kernels;
        CHECK(plan->graph->type(k.root).dtype == (mode == amp::bf16 ? DType::bf16 : DType::f16));
      }
    CHECK(attention_kernels == 2 * 2);
    for (int i = 0; i < 20; ++i)
      step(x, y);
    CHECK(step(x, y).loss.value() < first);
  }
}

TEST_CASE("a weight changed between AMP steps reaches the GEMMs (working copies refresh)",
          "[amp]") {
  Linear1 model{Parameter(tensor(DType::f32, {2, 1}, {0.5, -0.25}))};
  auto step = compile_step(model, squared_error, sgd{.lr = 0.0}, {.amp = amp::bf16});
  HostTensor x = tensor(DType::f32, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f32, {2, 1}, {1, 0});
  // Prediction x·w = (0, 0.5): loss ((0-1)^2 + (0.5-0)^2) / 2 = 0.625.
  CHECK(step(x, y).loss.value() == Approx(0.625));
  model.w.value = tensor(DType::f32, {2, 1}, {0.0, 0.0}); // replaced: loss (1 + 0) / 2
  CHECK(step(x, y).loss.value() == Approx(0.5));
  model.w.value.set(0, 1.0); // edited in place: x·w = (1, 3), loss (0 + 9) / 2
  CHECK(step(x, y).loss.value() == Approx(4.5));
}

TEST_CASE("fp16 loss scaling: an overflowing step is skipped, the scale halves, then grows",
          "[amp]") {
  Linear1 model{Parameter(tensor(DType::f32, {2, 1}, {0.5, -0.25}))};
  auto step = compile_step(
      model, squared_error, adamw{.lr = 0.01},
      {.amp = amp::fp16, .loss_scaling = LossScaling{.initial = 1024.0, .growth_interval = 3}});
  HostTensor x = tensor(DType::f32, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f32, {2, 1}, {1, 0});
  step(x, y);
  CHECK(step.runtime().loss_scale() == 1024.0);
  CHECK(step.runtime().skipped_updates() == 0);
  double w0 = model.w.value.at(0), w1 = model.w.value.at(1);
  CHECK(w0 != 0.5);

  // Errors of ~1e4 square to ~1e8: times the scale, the fp16 gradient overflows.
  HostTensor huge_y = tensor(DType::f32, {2, 1}, {2e4, -2e4});
  auto state_before = step.runtime().state();
  std::vector<double> m_before;
  for (auto& [name, t] : state_before)
    if (name.starts_with("state.m.")) m_before.push_back(t->at(0));
  StepOutput skipped = step(x, huge_y);
  CHECK(std::isfinite(skipped.loss.value()));
  CHECK(step.runtime().skipped_updates() == 1);
  CHECK(step.runtime().loss_scale() == 512.0);
  CHECK(model.w.value.at(0) == w0); // the update was skipped: nothing moved
  CHECK(model.w.value.at(1) == w1);
  for (auto& [name, t] : step.runtime().state())
    if (name.starts_with("state.m.")) CHECK(t->at(0) == m_before.at(0));

  // Three clean steps in a row grow the scale back.
  for (int i = 0; i < 3; ++i)
    step(x, y);
  CHECK(step.runtime().skipped_updates() == 1);
  CHECK(step.runtime().loss_scale() == 1024.0);
  CHECK(model.w.value.at(0) != w0);
}

TEST_CASE("fp16 loss scaling: the applied updates match an f32 run of as many updates", "[amp]") {
  // The default scale (65536) overflows fp16 at first: those steps are skipped. Scaling is exact
  // in binary (powers of two), so the applied updates follow an f32 run with that many updates
  // — only if skipped steps do not count towards AdamW's bias correction.
  auto run = [](AmpMode mode, int calls) {
    Linear1 model{Parameter(tensor(DType::f32, {2, 1}, {0.5, -0.25}))};
    auto step = compile_step(model, squared_error, adamw{.lr = 0.01}, {.amp = mode});
    HostTensor x = tensor(DType::f32, {2, 2}, {1, 2, 3, 4}), y = tensor(DType::f32, {2, 1}, {1, 0});
    for (int i = 0; i < calls; ++i)
      step(x, y);
    return std::tuple{model.w.value.at(0), model.w.value.at(1), step.runtime().skipped_updates()};
  };
  auto [b0, b1, skipped] = run(amp::fp16, 8);
  REQUIRE(skipped >= 1);
  REQUIRE(skipped < 8);
  auto [a0, a1, none] = run(amp::off, 8 - static_cast<int>(skipped));
  CHECK(none == 0);
  CHECK(b0 == Approx(a0).epsilon(2e-3));
  CHECK(b1 == Approx(a1).epsilon(2e-3));
}

TEST_CASE("loss scaling is refused outside fp16, and bad amp names are named", "[amp]") {
  Linear1 model{Parameter(tensor(DType::f32, {2, 1}, {0.5, -0.25}))};
  CHECK_THROWS_WITH(compile_step(model, squared_error, adamw{},
                                 {.amp = amp::bf16, .loss_scaling = LossScaling{}}),
                    Catch::Contains("fp16 autocast only"));
  CHECK_THROWS_WITH(amp_from_name("fp8"), Catch::Contains("off, bf16 or fp16"));
  CHECK(amp_from_name("bf16") == AmpMode::bf16);
}

TEST_CASE("value_and_grad with .amp: the gradients of a mixed-precision step, close to "
          "f32's but not equal",
          "[amp]") {
  Init init(5);
  GPT model(GPTConfig{.vocab = 32, .context = 8, .dim = 16, .depth = 1, .heads = 2}, init);
  auto loss = [](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next); };
  std::vector<double> ids(2 * 8);
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<double>((i * 5) % 32);
  HostTensor x = tensor(DType::i32, {2, 8}, ids), y = x;
  GradResult f32 = value_and_grad(model, loss, {"ids", "next"})(x, y);
  for (AmpMode mode : {amp::bf16, amp::fp16}) {
    INFO(amp_name(mode));
    auto grads = value_and_grad(model, loss, {.batch_names = {"ids", "next"}, .amp = mode});
    HostTensor batch[] = {x, y};
    CHECK(dtype_of_first(grads.compile(batch).graph(), OpId::matmul) ==
          (mode == amp::bf16 ? DType::bf16 : DType::f16));
    GradResult low = grads(x, y);
    CHECK(std::abs(low.value.at(0) - f32.value.at(0)) < 0.02);
    REQUIRE(low.grads.size() == f32.grads.size());
    for (const NamedTensor& g : f32.grads) {
      INFO(g.name);
      std::vector<double> a = g.tensor.to_doubles(), b = low.grad(g.name).to_doubles();
      double diff = 0, norm = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        diff += (a[i] - b[i]) * (a[i] - b[i]);
        norm += a[i] * a[i];
      }
      CHECK(low.grad(g.name).dtype() == DType::f32);
      CHECK(std::sqrt(diff) <= 0.05 * std::sqrt(norm));
      if (norm > 0) CHECK(diff > 0); // really computed in the low precision
    }
  }
}
