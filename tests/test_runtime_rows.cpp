// tests/test_runtime_rows.cpp — kernels whose row count is a launch parameter: which kernels
// qualify, one compiled kernel run at other row counts (in the NVPTX emulator) against the
// kernel compiled for that shape, and the guard that refuses code depending on the count
#include "jit/backend/cuda/cuda_device.hpp"
#include "jit/backend/cuda/gpu_launch.hpp"
#include "jit/backend/cuda/launch_plan.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/passes/runtime_rows.hpp"
#include "jit/pipeline/pipeline.hpp"
#include "jit/runtime/kernel_lookup.hpp"
#include "ops/value.hpp"
#include "tests/support/nvptx_emulator.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <iostream>
#include <map>
#include <random>
#include <set>

namespace sinter::testing {
namespace {

/// Embedding → layernorm → GELU → linear → cross entropy over a [batch, length] batch of ids,
/// differentiated with respect to every weight: row kernels (layernorm, the loss), column sums
/// (bias and γ/β gradients), loops over [batch, length, width] values seen as rows, a gather
/// and the table gradient's scatter.
Graph embedding_model_gradients(int64_t batch, int64_t length) {
  constexpr int64_t vocab = 11, width = 16, classes = 5;
  Graph g;
  Value ids = input(g, "ids", {DType::i32, {batch, length}});
  Value labels = input(g, "labels", {DType::i32, {batch * length}});
  Value table = input(g, "table", {DType::f32, {vocab, width}});
  Value gamma = input(g, "gamma", {DType::f32, {width}});
  Value beta = input(g, "beta", {DType::f32, {width}});
  Value w = input(g, "w", {DType::f32, {width, classes}});
  Value b = input(g, "b", {DType::f32, {classes}});
  Value h = gelu_tanh(layernorm(gather(table, ids), gamma, beta));
  Value logits = matmul(reshape(h, {batch * length, width}), w) + b;
  g.add_output("loss", cross_entropy_mean(logits, labels).id);
  return Pipeline::standard(AutodiffOptions{{"table", "gamma", "beta", "w", "b"}, 0})
      .run(g, DumpSelection(""), std::cerr);
}

/// One head of causal self-attention over embedded ids with learned positions, then a linear
/// layer and cross entropy, differentiated: kernels whose index algebra reads a token's position
/// (the position table's slice, the causal mask, softmax over the keys, the head permutes).
Graph sequence_model_gradients(int64_t batch, int64_t length) {
  constexpr int64_t vocab = 11, width = 8, heads = 2, context = 16, classes = 3;
  Graph g;
  Value ids = input(g, "ids", {DType::i32, {batch, length}});
  Value labels = input(g, "labels", {DType::i32, {batch * length}});
  Value table = input(g, "table", {DType::f32, {vocab, width}});
  Value positions = input(g, "positions", {DType::f32, {context, width}});
  Value w = input(g, "w", {DType::f32, {width, classes}});
  Value h = gather(table, ids) +
            broadcast_to(slice(positions, {0, 0}, {length, width}), {batch, length, width});
  Value q = permute(reshape(h, {batch, length, heads, width / heads}), {0, 2, 1, 3});
  Value scores = matmul(q, transpose(q)) * 0.5; // [batch, heads, length, length]
  Value causal = broadcast_to(less_equal(iota(g, DType::i32, {length, length}, 1),
                                         iota(g, DType::i32, {length, length}, 0)),
                              {batch, heads, length, length});
  Value mixed = matmul(softmax(where(causal, scores, -1e9)), q);
  Value o = reshape(permute(mixed, {0, 2, 1, 3}), {batch * length, width});
  g.add_output("loss", cross_entropy_mean(matmul(o, w), labels).id);
  return Pipeline::standard(AutodiffOptions{{"table", "positions", "w"}, 0})
      .run(g, DumpSelection(""), std::cerr);
}

struct GpuPlan {
  CompileRun run{"gpu plan", false, DumpSelection("")};
  Prepared prepared;
  explicit GpuPlan(const Graph& optimized) : prepared(prepare_for_nvptx(optimized, 90, run)) {}
  const FusionPlan& plan() const { return prepared.fusion; }
};

/// The key a RuntimeRowsKernel is cached under: its instance with nvptx_rows_extent rows.
CacheKey rows_key(const RuntimeRowsKernel& rows) {
  RowsInstance keyed = rows.instance(nvptx_rows_extent);
  return kernel_key(keyed.plan, keyed.kernel(), "test");
}

/// A buffer of `type` filled with values a kernel can read: indices below `index_limit`.
std::vector<std::byte> random_buffer(const TensorType& type, std::mt19937& rng,
                                     int64_t index_limit) {
  std::vector<std::byte> bytes(std::max<std::size_t>(byte_size(type), 16));
  int64_t n = numel(type.shape);
  if (type.dtype == DType::f32) {
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < n; ++i) {
      float v = normal(rng);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  } else if (type.dtype == DType::i32) {
    std::uniform_int_distribution<int32_t> index(0, static_cast<int32_t>(index_limit - 1));
    for (int64_t i = 0; i < n; ++i) {
      int32_t v = index(rng);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  } else if (type.dtype == DType::boolean) {
    for (int64_t i = 0; i < n; ++i)
      bytes[static_cast<std::size_t>(i)] = std::byte(rng() & 1);
  } else {
    FAIL("the test model has no " << dtype_name(type.dtype) << " buffer");
  }
  return bytes;
}

TEST_CASE("rows parameter: a kernel compiled for one row count computes what the kernel "
          "compiled for another count's shape does",
          "[emulated][rows-parameter]") {
  // Batches of 2×3 and 3×4 ids: the same kernels with 6 and 12 rows.
  GpuPlan small(embedding_model_gradients(2, 3)), large(embedding_model_gradients(3, 4));
  std::map<std::pair<uint64_t, uint64_t>, const Kernel*> large_by_key;
  std::size_t large_rows_kernels = 0;
  for (const Kernel& k : large.plan().kernels)
    if (auto rows = RuntimeRowsKernel::of(large.plan(), k)) {
      CacheKey key = rows_key(*rows);
      large_by_key[{key.lo, key.hi}] = &k;
      ++large_rows_kernels;
    }
  std::mt19937 rng(11);
  std::set<KernelKind> kinds;
  std::size_t matched = 0;
  for (const Kernel& k : small.plan().kernels) {
    std::optional<RuntimeRowsKernel> rows = RuntimeRowsKernel::of(small.plan(), k);
    if (!rows) continue;
    CacheKey key = rows_key(*rows);
    auto twin = large_by_key.find({key.lo, key.hi});
    INFO("kernel of %" << k.root << " (" << kernel_kind_name(k.kind) << ")");
    // The same code serves the other batch shape, unless a value depends on the count (the
    // loss gradient's 1 / rows).
    if (twin == large_by_key.end()) continue;
    const Kernel& other = *twin->second;
    const Graph& g = *large.plan().graph;
    std::optional<RuntimeRowsKernel> other_rows = RuntimeRowsKernel::of(large.plan(), other);
    REQUIRE(other_rows);
    CHECK(other_rows->rows() != rows->rows());
    if (other.in_place()) continue; // its output is one of its reads: nothing to compare apart
    // The kernel compiled for the small batch (scheduled for its launch), run on the large
    // batch's buffers with the large row count, against the large batch's own kernel.
    std::vector<std::vector<std::byte>> reads;
    for (ValueId r : other.reads)
      reads.push_back(random_buffer(g.type(r), rng, 5));
    auto run = [&](bool with_rows_parameter) {
      std::vector<std::vector<std::byte>> outputs;
      std::vector<void*> buffers;
      for (ValueId out : other.outputs())
        outputs.emplace_back(std::max<std::size_t>(byte_size(g.type(out)), 16));
      std::vector<std::vector<std::byte>> inputs = reads;
      for (auto& o : outputs)
        buffers.push_back(o.data());
      for (auto& in : inputs)
        buffers.push_back(in.data());
      if (with_rows_parameter)
        emulate_nvptx_rows_kernel(*rows, gpu_launch(*small.plan().graph, k), other_rows->rows(),
                                  buffers);
      else
        emulate_nvptx_kernel(large.plan(), other, buffers);
      return outputs;
    };
    std::vector<std::vector<std::byte>> want = run(false), got = run(true);
    for (std::size_t i = 0; i < want.size(); ++i) {
      const TensorType& t = g.type(other.outputs()[i]);
      REQUIRE(t.dtype == DType::f32);
      for (int64_t e = 0; e < numel(t.shape); ++e) {
        float a = 0, b = 0;
        std::memcpy(&a, want[i].data() + 4 * e, 4);
        std::memcpy(&b, got[i].data() + 4 * e, 4);
        INFO("output " << i << " element " << e);
        REQUIRE(b == Approx(a).epsilon(1e-6).margin(1e-6));
      }
    }
    kinds.insert(k.kind);
    ++matched;
  }
  CHECK(matched >= 4);
  CHECK(large_rows_kernels >= matched);
  CHECK(kinds.contains(KernelKind::row));         // layernorm, the loss
  CHECK(kinds.contains(KernelKind::reduce));      // γ, β and bias gradients: sums over the rows
  CHECK(kinds.contains(KernelKind::scatter_add)); // the table's gradient
}

/// Runs `kernel` of `plan` on random reads (indices below 5), either as compiled for its
/// shape or as `sized`'s code (scheduled for `launch`) at size `size`: its outputs.
std::vector<std::vector<std::byte>> run_kernel(const FusionPlan& plan, const Kernel& kernel,
                                               const RuntimeRowsKernel* sized,
                                               const GpuLaunch& launch, int64_t size,
                                               uint32_t seed) {
  const Graph& g = *plan.graph;
  std::mt19937 rng(seed);
  std::vector<std::vector<std::byte>> outputs, inputs;
  for (ValueId r : kernel.reads)
    inputs.push_back(random_buffer(g.type(r), rng, 5));
  std::vector<void*> buffers;
  for (ValueId out : kernel.outputs())
    outputs.emplace_back(std::max<std::size_t>(byte_size(g.type(out)), 16));
  for (auto& o : outputs)
    buffers.push_back(o.data());
  for (auto& in : inputs)
    buffers.push_back(in.data());
  if (sized)
    emulate_nvptx_rows_kernel(*sized, launch, size, buffers);
  else
    emulate_nvptx_kernel(plan, kernel, buffers);
  return outputs;
}

/// What run_unified ran: how many kernels, of which kinds, with which ops, and how many of
/// them were row kernels with column partials.
struct UnifiedRuns {
  std::size_t kernels = 0, row_partials = 0;
  std::set<OpId> ops;
  std::set<KernelKind> kinds;
};

/// Unifies the kernels of plans `a` and `b` (two sizes of one model), finds each kernel of
/// `c` (a third size) the way a device does (unified with `a`'s, the same cache key), and
/// runs the unified code at `c`'s size in the emulator against `c`'s own kernel.
UnifiedRuns run_unified(const GpuPlan& a, const GpuPlan& b, const GpuPlan& c) {
  // Every kernel of a plan by signature: kernels alike in all but their sizes share one.
  auto by_signature = [](const FusionPlan& plan) {
    std::multimap<std::string, RuntimeRowsKernel> out;
    for (const Kernel& k : plan.kernels)
      if (k.kind != KernelKind::gemm && k.kind != KernelKind::collective) {
        RuntimeRowsKernel captured = RuntimeRowsKernel::capture(plan, k);
        out.emplace(captured.signature(), std::move(captured));
      }
    return out;
  };
  std::multimap<std::string, RuntimeRowsKernel> at_a = by_signature(a.plan()),
                                                at_b = by_signature(b.plan());
  // What a device remembers of a plan: partial row kernels too.
  std::vector<std::optional<RuntimeRowsKernel>> captured = capture_shapes(c.plan());
  UnifiedRuns runs;
  for (std::size_t index = 0; index < c.plan().kernels.size(); ++index) {
    const Kernel& k = c.plan().kernels[index];
    if (k.kind == KernelKind::gemm || k.kind == KernelKind::collective) continue;
    if (!captured[index]) continue;
    const RuntimeRowsKernel& now = *captured[index];
    INFO("kernel of %" << k.root << " (" << kernel_kind_name(k.kind) << ")");
    // The code made from `b` and `a`, and the same kernel found at `c` (as a device finds it:
    // unified with the kernel remembered from `a`).
    std::optional<RuntimeRowsKernel> code, here;
    auto [first_a, last_a] = at_a.equal_range(now.signature());
    auto [first_b, last_b] = at_b.equal_range(now.signature());
    for (auto ka = first_a; ka != last_a && !code; ++ka) {
      here = RuntimeRowsKernel::unify(now, ka->second);
      for (auto kb = first_b; kb != last_b && here && !code; ++kb)
        if ((code = RuntimeRowsKernel::unify(kb->second, ka->second)) &&
            !code->instance(here->rows()).kernel().body.empty()) {
          // One binary: the same key at every size.
          CacheKey key = rows_key(*code), key_here = rows_key(*here);
          if (key.lo != key_here.lo || key.hi != key_here.hi) code.reset();
        }
    }
    if (!code) continue; // a value that no size explains (the loss's 1 / tokens)
    RowsInstance back = here->instance(here->rows());
    CHECK(RuntimeRowsKernel::capture(back.plan, back.kernel()).same_numbers(now));
    const Kernel* kb = nullptr;
    for (const Kernel& candidate : b.plan().kernels)
      if (candidate.kind == k.kind &&
          RuntimeRowsKernel::capture(b.plan(), candidate).signature() == now.signature())
        kb = &candidate;
    REQUIRE(kb);
    GpuLaunch launch = sized_launch(*code, gpu_launch(*b.plan().graph, *kb));
    if (!rows_kernel_emits(*code, launch)) continue;
    // The grid is the step's own (a block per group of rows where the kernel has partials).
    launch.blocks = gpu_launch(*c.plan().graph, k).blocks;
    auto want = run_kernel(c.plan(), k, nullptr, launch, 0, 5);
    auto got = run_kernel(c.plan(), k, &*code, launch, here->rows(), 5);
    const Graph& g = *c.plan().graph;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const TensorType& t = g.type(k.outputs()[i]);
      REQUIRE((t.dtype == DType::f32 || t.dtype == DType::boolean));
      std::size_t element = t.dtype == DType::f32 ? 4 : 1;
      for (int64_t e = 0; e < numel(t.shape); ++e) {
        float x = 0, y = 0;
        std::memcpy(&x, want[i].data() + element * e, element);
        std::memcpy(&y, got[i].data() + element * e, element);
        INFO("output " << i << " element " << e);
        REQUIRE(y == Approx(x).epsilon(1e-6).margin(1e-6));
      }
    }
    for (ValueId v : k.body)
      runs.ops.insert(g.node(v).op);
    runs.kinds.insert(k.kind);
    runs.row_partials += k.kind == KernelKind::row && !row_layout(g, k).partials.empty();
    ++runs.kernels;
  }
  return runs;
}

TEST_CASE("changed dim as a parameter: kernels planned at two sequence lengths unify, and "
          "their code runs at a third length like that length's own kernels",
          "[emulated][rows-parameter]") {
  // Lengths 5 and 7 make the code; length 9 runs it (none equals another dim of the model).
  GpuPlan five(sequence_model_gradients(2, 5)), seven(sequence_model_gradients(2, 7)),
      nine(sequence_model_gradients(2, 9));
  UnifiedRuns runs = run_unified(five, seven, nine);
  CHECK(runs.kernels >= 6);
  CHECK(runs.kinds.contains(KernelKind::row)); // softmax over the keys
  CHECK(runs.ops.contains(OpId::permute));     // the heads
  CHECK(runs.ops.contains(OpId::iota));        // the causal mask
  CHECK(runs.ops.contains(OpId::slice));       // the position table's first `length` rows
}

TEST_CASE("changed dim as a parameter: a layernorm backward's row kernel with γ and β partials "
          "per group of 8 rows is one kernel at every length, its group count the parameter",
          "[emulated][rows-parameter]") {
  // 64 and 96 rows (8 and 12 groups) make the code; 80 rows (10 groups) run it. Fewer rows than
  // 128 groups of 8 still split into groups of 8, so every length has the same kernels.
  GpuPlan sixty_four(embedding_model_gradients(2, 32)),
      ninety_six(embedding_model_gradients(2, 48)), eighty(embedding_model_gradients(2, 40));
  UnifiedRuns runs = run_unified(sixty_four, ninety_six, eighty);
  CHECK(runs.row_partials >= 1);
  CHECK(runs.kinds.contains(KernelKind::reduce)); // the short sums over the groups
}

TEST_CASE("rows parameter: a kernel that reads a row's position within a sequence keeps its "
          "shape",
          "[rows-parameter]") {
  // x + positions[:length]: each row reads the position table at its index along the sequence,
  // which the row count alone cannot give.
  Graph g;
  Value x = input(g, "x", {DType::f32, {2, 3, 8}});
  Value positions = input(g, "positions", {DType::f32, {3, 8}});
  g.add_output("y", (x + broadcast_to(positions, {2, 3, 8})).id);
  GpuPlan plan(Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr));
  REQUIRE(plan.plan().kernels.size() == 1);
  CHECK_FALSE(RuntimeRowsKernel::of(plan.plan(), plan.plan().kernels[0]));

  // The same sum with a row-independent bias takes the row count as a parameter.
  Graph h;
  Value y = input(h, "x", {DType::f32, {2, 3, 8}});
  Value bias = input(h, "bias", {DType::f32, {8}});
  h.add_output("y", (y + broadcast_to(bias, {2, 3, 8})).id);
  GpuPlan biased(Pipeline::standard(std::nullopt).run(h, DumpSelection(""), std::cerr));
  REQUIRE(biased.plan().kernels.size() == 1);
  std::optional<RuntimeRowsKernel> rows =
      RuntimeRowsKernel::of(biased.plan(), biased.plan().kernels[0]);
  REQUIRE(rows);
  CHECK(rows->rows() == 6);
}

/// tanh(x + bias) and the sum of x² over axis 0, for x of `shape` and a bias of its last dim:
/// a loop kernel and a reduce kernel.
Graph bias_loop_and_column_sum(const Shape& shape) {
  Graph g;
  Value x = input(g, "x", {DType::f32, shape});
  Value bias = input(g, "bias", {DType::f32, {shape.back()}});
  g.add_output("y", tanh(x + broadcast_to(bias, shape)).id);
  g.add_output("column_sums", sum(x * x, {0}).id);
  return Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr);
}

TEST_CASE("rows parameter: a bias or a column sum as long as the rows are many is read as "
          "independent of them",
          "[rows-parameter]") {
  // 16 rows of 16: the bias and the column sums have 16 entries, as the rows do. The kernels
  // are those of 4 rows of 16 (the same cache key), the rows their parameter.
  GpuPlan square(bias_loop_and_column_sum({16, 16})), narrow(bias_loop_and_column_sum({4, 16}));
  REQUIRE(square.plan().kernels.size() == narrow.plan().kernels.size());
  std::set<KernelKind> kinds;
  for (std::size_t i = 0; i < square.plan().kernels.size(); ++i) {
    const Kernel& k = square.plan().kernels[i];
    INFO("kernel of %" << k.root << " (" << kernel_kind_name(k.kind) << ")");
    std::optional<RuntimeRowsKernel> rows = RuntimeRowsKernel::of(square.plan(), k);
    std::optional<RuntimeRowsKernel> fewer =
        RuntimeRowsKernel::of(narrow.plan(), narrow.plan().kernels[i]);
    REQUIRE(rows);
    REQUIRE(fewer);
    CHECK(rows->rows() == 16);
    CacheKey a = rows_key(*rows), b = rows_key(*fewer);
    CHECK((a.lo == b.lo && a.hi == b.hi));
    kinds.insert(k.kind);
  }
  CHECK(kinds.contains(KernelKind::loop));
  CHECK(kinds.contains(KernelKind::reduce));
}

TEST_CASE("rows parameter: where the row count is not the size two plans differ in, the kernel "
          "takes the size that changes",
          "[rows-parameter]") {
  // A sum over the batch keeps one value per position: its rows are the batch (3 at both
  // lengths), the length is in its columns. The bias loop's rows are batch × length.
  GpuPlan five(bias_loop_and_column_sum({3, 5, 8})), seven(bias_loop_and_column_sum({3, 7, 8}));
  REQUIRE(five.plan().kernels.size() == seven.plan().kernels.size());
  std::set<KernelKind> kinds;
  for (std::size_t i = 0; i < seven.plan().kernels.size(); ++i) {
    const Kernel& k = seven.plan().kernels[i];
    INFO("kernel of %" << k.root << " (" << kernel_kind_name(k.kind) << ")");
    std::optional<RuntimeRowsKernel> rows = RuntimeRowsKernel::of(seven.plan(), k);
    std::optional<RuntimeRowsKernel> sized =
        RuntimeRowsKernel::unify(RuntimeRowsKernel::capture(seven.plan(), k),
                                 RuntimeRowsKernel::capture(five.plan(), five.plan().kernels[i]));
    REQUIRE(rows);
    REQUIRE(sized);
    CHECK(row_count_covers(*rows, *sized) == (k.kind == KernelKind::loop));
    kinds.insert(k.kind);
  }
  CHECK(kinds == std::set<KernelKind>{KernelKind::loop, KernelKind::reduce});
}

TEST_CASE("rows parameter: code that depends on the row count beyond the loop bounds is "
          "refused",
          "[rows-parameter]") {
  // A column sum whose output is as long as the extent the rows are compiled with: the
  // emitter cannot tell that dim from the rows, and the second instance shows the difference.
  Graph g;
  Value x = input(g, "x", {DType::f32, {2, nvptx_rows_extent}});
  g.add_output("y", sum(x, {0}).id);
  GpuPlan plan(Pipeline::standard(std::nullopt).run(g, DumpSelection(""), std::cerr));
  REQUIRE(plan.plan().kernels.size() == 1);
  const Kernel& k = plan.plan().kernels[0];
  std::optional<RuntimeRowsKernel> rows = RuntimeRowsKernel::of(plan.plan(), k);
  REQUIRE(rows);
  CHECK_FALSE(rows_kernel_emits(*rows, gpu_launch(*plan.plan().graph, k)));
}

} // namespace
} // namespace sinter::testing
