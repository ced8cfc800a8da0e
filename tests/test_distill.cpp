// tests/test_distill.cpp — distillation in one compiled step, teacher weights, max batch, OOM
#include "dsl/sinter.hpp"
#include "env_override.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>

using namespace sinter;

namespace {

ViTConfig teacher_config() {
  return {.image = 8, .patch = 4, .dim = 32, .depth = 2, .heads = 4, .classes = 3};
}
ViTConfig student_config() {
  return {.image = 8, .patch = 4, .dim = 8, .depth = 1, .heads = 2, .classes = 3};
}

std::pair<HostTensor, HostTensor> image_batch(int64_t n, int seed = 0) {
  std::vector<double> pixels, labels;
  for (int64_t i = 0; i < n * 64; ++i)
    pixels.push_back(std::cos(0.37 * static_cast<double>(i) + seed));
  for (int64_t i = 0; i < n; ++i)
    labels.push_back(static_cast<double>((i * 7 + seed) % 3));
  return {HostTensor::from_doubles(DType::f32, {n, 8, 8}, pixels),
          HostTensor::from_doubles(DType::i32, {n}, labels)};
}

auto kd = [](ViT& s, const ViT& t, Var images, Var labels) {
  return kd_loss(s(images), t(images), labels, {.temperature = 2.0, .alpha = 0.5});
};

std::vector<double> weights_of(ViT& m) {
  std::vector<double> out;
  for_each_parameter(m, [&](const std::string&, Parameter& p) {
    auto v = p.value.to_doubles();
    out.insert(out.end(), v.begin(), v.end());
  });
  return out;
}

/// Sets an environment variable for one scope.
struct ScopedEnv : testing::EnvOverride {
  ScopedEnv(std::string n, const std::string& value) : EnvOverride(std::move(n), value) {}
};

} // namespace

TEST_CASE("a distillation step trains the student only: the teacher gets no gradient and no "
          "optimizer state",
          "[distill]") {
  Init ti(1), si(2);
  ViT teacher(teacher_config(), ti), student(student_config(), si);
  auto [images, labels] = image_batch(6);
  std::vector<double> teacher_before = weights_of(teacher), student_before = weights_of(student);

  // The loss the step reports first is kd_loss of the two models' logits before any update.
  auto student_logits = compile_eval(student, [](ViT& m, Var x) { return m(x); });
  auto teacher_logits = compile_eval(teacher, [](ViT& m, Var x) { return m(x); });
  auto kd_only =
      jit([](Var s, Var t, Var y) { return kd_loss(s, t, y, {.temperature = 2.0, .alpha = 0.5}); });
  double expected = kd_only(student_logits(images), teacher_logits(images), labels).at(0);

  auto step = compile_distill_step(student, teacher, kd, adamw{.lr = 0.01},
                                   {.step = {.batch_names = {"images", "labels"}}});
  double first = step(images, labels).loss.value(), last = first;
  CHECK(first == Approx(expected).epsilon(1e-5));
  for (int i = 0; i < 40; ++i)
    last = step(images, labels).loss.value();
  CHECK(std::isfinite(last));
  CHECK(last < 0.7 * first);
  CHECK(weights_of(teacher) == teacher_before); // bit for bit
  CHECK(weights_of(student) != student_before);

  for (const auto& [name, tensor] : step.runtime().state())
    CHECK(name.find("teacher") == std::string::npos);
  const Graph& g = step.runtime().program().graph();
  int64_t teacher_inputs = 0;
  for (const NamedValue& in : g.inputs())
    teacher_inputs += in.name.starts_with("teacher.");
  int64_t teacher_parameters = 0;
  for_each_parameter(teacher, [&](const std::string&, Parameter&) { ++teacher_parameters; });
  CHECK(teacher_inputs == teacher_parameters);
  for (const NamedValue& out : g.outputs())
    CHECK(out.name.find("teacher") == std::string::npos);
}

TEST_CASE("the memory plan frees the teacher's activations before the backward pass", "[distill]") {
  Init ti(1), si(2);
  ViT teacher(teacher_config(), ti), student(student_config(), si);
  const int64_t batch = 16;
  auto [images, labels] = image_batch(batch);
  auto step = compile_distill_step(student, teacher, kd, adamw{.lr = 0.01});
  step(images, labels);
  const CompiledGraph& program = step.runtime().program();
  const FusionPlan& fusion = *program.fusion_plan();
  const Graph& g = *fusion.graph;
  const MemoryPlan& memory = program.memory_plan();

  // Nodes computed from the teacher's weights, and the forward: what the loss depends on.
  std::vector<bool> from_teacher(g.size(), false), forward(g.size(), false);
  for (const NamedValue& in : g.inputs())
    from_teacher[in.id] = in.name.starts_with("teacher.");
  for (ValueId id = 0; id < g.size(); ++id)
    for (ValueId operand : g.node(id).inputs)
      from_teacher[id] = from_teacher[id] || from_teacher[operand];
  forward[g.outputs()[0].id] = true;
  for (ValueId id = static_cast<ValueId>(g.size()); id-- > 0;)
    if (forward[id])
      for (ValueId operand : g.node(id).inputs)
        forward[operand] = true;
  // The backward pass starts with the first kernel that writes something the loss does not need.
  std::size_t backward_start = fusion.kernels.size();
  for (std::size_t k = 0; k < fusion.kernels.size() && backward_start == fusion.kernels.size(); ++k)
    for (ValueId out : fusion.kernels[k].outputs())
      if (!forward[out]) backward_start = k;
  REQUIRE(backward_start < fusion.kernels.size());

  int64_t teacher_bytes = 0, teacher_alive_at_backward = 0;
  for (const BufferSlot& slot : memory.slots()) {
    if (!from_teacher[slot.node]) continue;
    teacher_bytes += slot.bytes;
    if (slot.first < backward_start && slot.last >= backward_start)
      teacher_alive_at_backward += slot.bytes;
  }
  // What the KL gradient needs of the teacher is its softened probabilities, [batch, classes];
  // its hidden states ([batch, tokens, dim] and wider) are all gone.
  const int64_t logits_bytes = (batch * teacher_config().classes * 4 + MemoryPlan::alignment - 1) /
                               MemoryPlan::alignment * MemoryPlan::alignment;
  INFO("teacher intermediates " << teacher_bytes << " bytes, alive at the backward pass "
                                << teacher_alive_at_backward << " bytes");
  CHECK(teacher_bytes > 50 * logits_bytes);
  CHECK(teacher_alive_at_backward <= 2 * logits_bytes);
}

TEST_CASE("under AMP the teacher's weights are stored in the low precision, and it adds its "
          "biases, positions and residual stream in bf16, as a PyTorch teacher converted to bf16 "
          "does; an f32 teacher's stream stays f32",
          "[distill][amp]") {
  Init ti(1), si(2), si2(2);
  ViT teacher(teacher_config(), ti), student(student_config(), si), twin(student_config(), si2);
  auto [images, labels] = image_batch(6);
  auto low =
      compile_distill_step(student, teacher, kd, adamw{.lr = 0.01}, {.step = {.amp = amp::bf16}});
  auto full = compile_distill_step(twin, teacher, kd, adamw{.lr = 0.01},
                                   {.step = {.amp = amp::bf16}, .teacher_dtype = DType::f32});
  double a = low(images, labels).loss.value(), b = full(images, labels).loss.value();
  CHECK(a == Approx(b).epsilon(0.02));
  auto teacher_dtypes = [](const Graph& g) {
    std::set<DType> dtypes;
    for (const NamedValue& in : g.inputs())
      if (in.name.starts_with("teacher.")) dtypes.insert(g.type(in.id).dtype);
    return dtypes;
  };
  CHECK(teacher_dtypes(low.runtime().program().graph()) == std::set<DType>{DType::bf16});
  CHECK(teacher_dtypes(full.runtime().program().graph()) == std::set<DType>{DType::f32});
  CHECK(low.runtime().resident_bytes().frozen * 2 == full.runtime().resident_bytes().frozen);
  // The residual adds of the teacher's blocks (`x + attn(ln1(x))`, scoped `teacher.blocks.N`).
  auto stream_dtypes = [](const Graph& g) {
    std::set<DType> dtypes;
    for (ValueId id = 0; id < g.size(); ++id) {
      const Node& n = g.node(id);
      const std::string& scope = g.scope_path(n.scope);
      if (n.op == OpId::add && scope.starts_with("teacher.blocks.") &&
          scope.find('.', std::string("teacher.blocks.").size()) == std::string::npos)
        dtypes.insert(n.type.dtype);
    }
    return dtypes;
  };
  CHECK(stream_dtypes(low.runtime().program().graph()) == std::set<DType>{DType::bf16});
  CHECK(stream_dtypes(full.runtime().program().graph()) == std::set<DType>{DType::f32});
  // A changed teacher is seen by the next call (its stored copy is refreshed): with every
  // weight zero its logits are all zero, so its distribution is uniform.
  for_each_parameter(teacher, [](const std::string&, Parameter& p) {
    for (int64_t k = 0; k < p.value.size(); ++k)
      p.value.set(k, 0.0);
  });
  double stale = full(images, labels).loss.value(); // f32 copy: reads the teacher directly
  double refreshed = low(images, labels).loss.value();
  CHECK(refreshed == Approx(stale).epsilon(0.03));
  CHECK(std::abs(refreshed - b) > 1e-3);
}

TEST_CASE("a teacher loads from a safetensors file; a mismatched or corrupt file is refused by "
          "name",
          "[distill][checkpoint]") {
  sinter::testing::TempDir dir("sinter-teacher");
  Init ti(1);
  ViT teacher(teacher_config(), ti);
  auto file = dir.path / "teacher.safetensors";
  save_weights(file, teacher);

  Init other(9);
  ViT loaded(teacher_config(), other);
  load_weights(file, loaded);
  CHECK(weights_of(loaded) == weights_of(teacher));

  // The vit recipe's checkpoints (model.* plus optimizer.*) load too.
  auto [images, labels] = image_batch(4);
  Init si(3);
  ViT trained(teacher_config(), si);
  auto step = compile_step(
      trained, [](ViT& m, Var x, Var y) { return cross_entropy_mean(m(x), y); }, adamw{});
  step(images, labels);
  save_checkpoint(dir.path / "vit.safetensors", trained, step);
  load_weights(dir.path / "vit.safetensors", loaded);
  CHECK(weights_of(loaded) == weights_of(trained));

  // Another width: the error names the tensor and both types, and nothing changes.
  ViTConfig wider = teacher_config();
  wider.dim = 16;
  Init wi(4);
  ViT mismatched(wider, wi);
  std::vector<double> untouched = weights_of(mismatched);
  CHECK_THROWS_WITH(load_weights(file, mismatched), Catch::Contains("'model.embed.proj.weight'") &&
                                                        Catch::Contains("f32[16,32]") &&
                                                        Catch::Contains("f32[16,16]"));
  CHECK(weights_of(mismatched) == untouched);

  // Another depth: a block the file lacks is named.
  ViTConfig deeper = teacher_config();
  deeper.depth = 3;
  Init di(5);
  ViT too_deep(deeper, di);
  CHECK_THROWS_WITH(load_weights(file, too_deep), Catch::Contains("'model.blocks.2."));

  // A truncated file is refused as invalid, naming the file.
  auto corrupt = dir.path / "corrupt.safetensors";
  {
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(corrupt, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  CHECK_THROWS_WITH(load_weights(corrupt, loaded), Catch::Contains("corrupt.safetensors"));
}

TEST_CASE("max_batch brackets the budget: peak at max <= budget < peak at max + 1",
          "[distill][max-batch]") {
  Init ti(1), si(2);
  ViT teacher(teacher_config(), ti), student(student_config(), si);
  auto [images, labels] = image_batch(4);
  auto step = compile_distill_step(student, teacher, kd, adamw{.lr = 0.01});
  HostTensor example[] = {images, labels};
  auto peak = [&](int64_t b) { return step.plan_memory(resized_batch(example, b)).total(); };

  for (int64_t target : {1, 37, 300}) {
    int64_t budget = (peak(target) + peak(target + 1)) / 2;
    MaxBatch fit = step.max_batch(example, budget);
    INFO("target " << target << ": " << fit.line() << " after " << fit.plans << " plans");
    CHECK(fit.batch == target);
    CHECK(fit.peak_bytes == peak(fit.batch));
    CHECK(fit.next_peak_bytes == peak(fit.batch + 1));
    CHECK(fit.peak_bytes <= budget);
    CHECK(budget < fit.next_peak_bytes);
    CHECK(fit.plans <= 12);
  }
  MaxBatch none = step.max_batch(example, peak(1) - 1);
  CHECK(none.batch == 0);
  CHECK(none.next_peak_bytes == peak(1));
  CHECK(none.line() == "max_batch=0 peak_bytes=0 next_peak_bytes=" + std::to_string(peak(1)) +
                           " budget_bytes=" + std::to_string(peak(1) - 1));

  // The plan counts the teacher, the student, its optimizer state and the batch.
  StepMemory m = step.plan_memory(example);
  TrainStep::ResidentBytes resident = step.runtime().resident_bytes();
  CHECK(resident.frozen > 4 * resident.parameters); // the teacher is the larger model
  CHECK(resident.optimizer_state == 2 * resident.parameters);
  CHECK(m.inputs >= resident.parameters + resident.optimizer_state + resident.frozen +
                        static_cast<int64_t>(images.byte_size() + labels.byte_size()));
  CHECK(m.arena > 0);
}

TEST_CASE("running out of memory explains the plan, the largest buffers and the batch that fits",
          "[distill][max-batch]") {
  Init ti(1), si(2);
  ViT teacher(teacher_config(), ti), student(student_config(), si);
  auto step = compile_distill_step(student, teacher, kd, adamw{.lr = 0.01});
  auto [small_images, small_labels] = image_batch(8);
  HostTensor example[] = {small_images, small_labels};
  int64_t limit = step.plan_memory(resized_batch(example, 20)).total();
  MaxBatch fit = step.max_batch(example, limit);
  REQUIRE(fit.batch >= 20);

  ScopedEnv env("SINTER_MEMORY_LIMIT", std::to_string(limit));
  auto [images, labels] = image_batch(200);
  try {
    step(images, labels);
    FAIL("a step over SINTER_MEMORY_LIMIT ran");
  } catch (const OutOfMemory& e) {
    std::string why = e.what();
    INFO(why);
    CHECK(e.planned_bytes() > limit);
    CHECK(e.available_bytes() == limit);
    CHECK_THAT(why, Catch::Contains("planned peak") && Catch::Contains("free") &&
                        Catch::Contains("largest buffers:") &&
                        Catch::Contains("largest batch that fits: " + std::to_string(fit.batch)) &&
                        Catch::Contains("f32[200,8,8]"));
    // Five buffers, each with its model path or input name.
    std::size_t listed = 0;
    for (std::size_t at = why.find("\n    "); at != std::string::npos;
         at = why.find("\n    ", at + 1))
      ++listed;
    CHECK(listed == 5);
    CHECK_THAT(why, Catch::Contains("arena: blocks.") ||
                        Catch::Contains("arena: teacher.blocks.") ||
                        Catch::Contains("input: teacher."));
  }
  // Within the limit the step runs.
  CHECK(std::isfinite(step(small_images, small_labels).loss.value()));
  ScopedEnv bad("SINTER_MEMORY_LIMIT", "lots");
  CHECK_THROWS_WITH(step(images, labels),
                    Catch::Contains("SINTER_MEMORY_LIMIT") && Catch::Contains("suffix"));
}

TEST_CASE("a ViT takes channels-first images; patches flatten channel-major", "[distill]") {
  Init init(3);
  PatchEmbed embed(2, 12, init, 3);
  REQUIRE(embed.proj.weight.value.shape() == Shape{12, 12});
  std::vector<double> identity(144, 0.0), ramp;
  for (int i = 0; i < 12; ++i)
    identity[static_cast<std::size_t>(i * 13)] = 1.0;
  embed.proj.weight.value = HostTensor::from_doubles(DType::f32, {12, 12}, identity);
  embed.proj.bias.value = HostTensor::from_doubles(DType::f32, {12}, std::vector<double>(12, 0.0));
  for (int i = 0; i < 2 * 3 * 4 * 4; ++i)
    ramp.push_back(i);
  HostTensor images = HostTensor::from_doubles(DType::f32, {2, 3, 4, 4}, ramp);
  auto patches = compile_eval(embed, [](PatchEmbed& e, Var x) { return e(x); });
  HostTensor out = patches(images);
  REQUIRE(out.shape() == Shape{2, 4, 12});
  // Image 1, patch (row 1, col 0), element (channel c, y, x) = 48 + c·16 + (2 + y)·4 + x.
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x)
        CHECK(out.at((1 * 4 + 2) * 12 + c * 4 + y * 2 + x) == 48 + c * 16 + (2 + y) * 4 + x);

  ViT vit(
      ViTConfig{
          .image = 8, .patch = 4, .dim = 8, .depth = 1, .heads = 2, .classes = 5, .channels = 3},
      init);
  auto logits = compile_eval(vit, [](ViT& m, Var x) { return m(x); });
  std::vector<double> pixels(2 * 3 * 64, 0.25);
  CHECK(logits(HostTensor::from_doubles(DType::f32, {2, 3, 8, 8}, pixels)).shape() == Shape{2, 5});
  CHECK_THROWS_WITH(
      logits(HostTensor::from_doubles(DType::f32, {2, 8, 8}, std::vector<double>(128, 0.0))),
      Catch::Contains("[batch, 3, H, W]"));
}

TEST_CASE("a profile of a distillation step gives the teacher's forward its own role and phase",
          "[distill][profiler]") {
  Init ti(1), si(2);
  ViT teacher(teacher_config(), ti), student(student_config(), si);
  auto [images, labels] = image_batch(6);
  auto step = compile_distill_step(student, teacher, kd, adamw{.lr = 0.01},
                                   {.step = {.batch_names = {"images", "labels"}}});
  step(images, labels);
  testing::TempDir dir;
  profile::start(dir.path, {.skip_steps = 0, .print = false});
  for (int i = 0; i < 5; ++i)
    step(images, labels);
  profile::Summary s = profile::stop();
  INFO(s.text());
  CHECK(s.phases.teacher > 0);
  CHECK(s.phases.forward > 0);
  int64_t teacher_gemms = 0, student_gemms = 0;
  for (const profile::KernelRow& k : s.kernels) {
    if (!k.info.gemm) continue;
    // The teacher's forward reads only teacher.* weights; the student's (and every gradient)
    // reads a trained parameter.
    teacher_gemms += k.info.role == profile::Role::teacher;
    student_gemms += k.info.role == profile::Role::forward;
  }
  CHECK(teacher_gemms > 0);
  CHECK(student_gemms > 0);
}
