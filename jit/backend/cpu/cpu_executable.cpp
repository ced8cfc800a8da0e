// jit/backend/cpu/cpu_executable.cpp — kernel launches over a static arena, GEMMs through the
// bridge
#include "jit/backend/cpu/cpu_executable.hpp"

#include "jit/api.hpp"
#include "jit/backend/attention_layout.hpp"
#include "jit/backend/backends.hpp"
#include "jit/backend/context.hpp"
#include "jit/backend/cpu/cpu_schedule.hpp"
#include "jit/dist/collective_launch.hpp"
#include "jit/passes/passes.hpp"
#include "jit/profile/kernel_costs.hpp"
#include "jit/profile/numerics_check.hpp"
#include "kernels/cpu/blas_gemm.hpp"
#include "kernels/cpu/cpu_attention.hpp"
#include "ops/attention_attrs.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <new>

namespace sinter {
namespace {

/// Chunks of at least this many elements are worth handing to another thread.
constexpr int64_t elements_per_chunk = 1 << 14;

} // namespace

namespace {

/// Work (multiply-adds per matrix) under which a GEMM runs as a fused loop kernel instead of a
/// library call: for the many tiny per-head products of attention, call overhead dominates.
constexpr int64_t small_gemm_work = 32 * 32 * 32;

/// Rewrites small batched matmuls as broadcast-multiply-reduce, which fusion turns into one
/// generated kernel (C[.., i, j] = sum over k of A[.., i, k] * B[.., k, j]).
Graph small_matmuls_as_reductions(const Graph& graph) {
  return rebuild(graph, [](const Node& n, std::span<const Value> in) -> Value {
    if (n.op != OpId::matmul) return {};
    Shape a = in[0].shape(), b = in[1].shape();
    int64_t m = a[a.size() - 2], k = a.back(), nn = b.back();
    if (a.size() < 3 || m * k * nn > small_gemm_work || !is_float(n.type.dtype)) return {};
    Shape batch(a.begin(), a.end() - 2);
    auto with = [&](Shape tail) {
      Shape s = batch;
      s.insert(s.end(), tail.begin(), tail.end());
      return s;
    };
    Value lhs =
        emit(OpId::broadcast, {reshape(in[0], with({m, k, 1}))}, Attrs{.ints = with({m, k, nn})});
    Value rhs =
        emit(OpId::broadcast, {reshape(in[1], with({1, k, nn}))}, Attrs{.ints = with({m, k, nn})});
    auto axis = static_cast<int64_t>(batch.size() + 1);
    return emit(OpId::reduce_sum, {lhs * rhs}, Attrs{.ints = {axis}});
  });
}

/// A fused attention kernel (forward and log-sum-exp, or gradients) through kernels/.
void run_attention(const FusionPlan& plan, const Kernel& kernel, const std::vector<void*>& pointer,
                   ThreadPool& pool) {
  const Graph& g = *plan.graph;
  const Node& root = g.node(kernel.root);
  AttentionLayout layout = attention_layout(g, root);
  bool backward = layout.backward;
  auto operand = [&](std::size_t i) { return pointer[plan.view_of[root.inputs[i]]]; };
  kernels::AttentionProblem p;
  p.dtype = g.type(root.inputs[0]).dtype;
  p.tq = layout.tq;
  p.d = layout.d;
  p.tk = layout.tk;
  p.dv = layout.dv;
  p.batches = layout.batches;
  p.scale = layout.scale;
  p.causal = layout.causal;
  if (layout.has_mask) {
    p.mask = static_cast<const uint8_t*>(operand(layout.mask_operand));
    p.mask_row_stride = layout.mask_row_stride;
    p.mask_col_stride = layout.mask_col_stride;
    p.mask_offset.resize(static_cast<std::size_t>(p.batches));
    for (int64_t b = 0; b < p.batches; ++b)
      p.mask_offset[static_cast<std::size_t>(b)] = layout.mask_offset(b);
  }
  if (!backward) {
    kernels::AttentionForwardArgs a{operand(0), operand(1), operand(2)};
    for (ValueId out : kernel.outputs()) {
      if (g.node(out).op == OpId::fused_attention)
        a.o = pointer[out];
      else {
        a.lse = pointer[out];
        p.lse_dtype = g.type(out).dtype;
      }
    }
    int64_t rows = p.batches * p.tq;
    int64_t chunk = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, p.tk * (p.d + p.dv)));
    pool.parallel_for(rows, chunk, [&](int64_t begin, int64_t end) {
      kernels::attention_forward(p, a, begin, end);
    });
    return;
  }
  kernels::AttentionBackwardArgs a{operand(0), operand(1), operand(2),
                                   operand(3), operand(5), operand(4)};
  p.lse_dtype = g.type(root.inputs[4]).dtype;
  for (ValueId out : kernel.outputs())
    (g.node(out).attrs.ints[0] == 0   ? a.dq
     : g.node(out).attrs.ints[0] == 1 ? a.dk
                                      : a.dv) = pointer[out];
  pool.parallel_for(p.batches, 1, [&](int64_t begin, int64_t end) {
    kernels::attention_backward(p, a, begin, end);
  });
}

/// How a kernel that joins stored buffers (or views of them) along one axis copies them; none
/// when it computes anything else.
std::optional<ConcatCopy> concat_copy(const FusionPlan& plan, const Kernel& k) {
  const Graph& g = *plan.graph;
  const Node& root = g.node(k.root);
  if (k.kind != KernelKind::loop || root.op != OpId::concat || !k.extra_outputs.empty())
    return std::nullopt;
  const Shape& shape = root.type.shape;
  auto axis = static_cast<std::size_t>(*normalize_axis(root.attrs.ints[0], shape.size()));
  ConcatCopy copy;
  for (std::size_t d = 0; d < axis; ++d)
    copy.outer *= shape[d];
  for (ValueId in : root.inputs) {
    ValueId buffer = plan.view_of[in];
    if (!plan.materialized[buffer]) return std::nullopt;
    const Shape& part = g.type(in).shape;
    int64_t block = static_cast<int64_t>(dtype_bytes(root.type.dtype));
    for (std::size_t d = axis; d < part.size(); ++d)
      block *= part[d];
    copy.sources.push_back(buffer);
    copy.block_bytes.push_back(block);
  }
  return copy;
}

/// How a kernel that only gathers rows of stored tables by one stored index buffer copies
/// them; none when it computes anything else.
std::optional<GatherCopy> gather_copy(const FusionPlan& plan, const Kernel& k) {
  const Graph& g = *plan.graph;
  if (k.kind != KernelKind::loop || k.body.size() != k.outputs().size()) return std::nullopt;
  GatherCopy copy;
  for (ValueId id : k.body) {
    const Node& n = g.node(id);
    if (n.op != OpId::gather || !k.writes(id)) return std::nullopt;
    ValueId table = n.inputs[0], indices = n.inputs[1];
    if (!plan.loads(k, table) || !plan.loads(k, indices)) return std::nullopt;
    if (copy.parts.empty()) {
      copy.indices = plan.view_of[indices];
      copy.count = numel(g.type(indices).shape);
    } else if (plan.view_of[indices] != copy.indices) {
      return std::nullopt;
    }
    const TensorType& t = g.type(table);
    auto row = static_cast<int64_t>(dtype_bytes(t.dtype));
    for (std::size_t d = 1; d < t.shape.size(); ++d)
      row *= t.shape[d];
    copy.parts.push_back({plan.view_of[table], id, t.shape[0], row});
  }
  DType index_type = g.type(copy.indices).dtype;
  if (index_type != DType::i32 && index_type != DType::i64) return std::nullopt;
  return copy;
}

} // namespace

CpuExecutable::CpuExecutable(Prepared prepared, KernelLibrary& library, ThreadPool& pool,
                             CompileRun& run)
    : graph_(std::move(prepared.graph)), fusion_(std::move(prepared.fusion)),
      memory_(std::move(prepared.memory)), pool_(pool) {
  auto start = std::chrono::steady_clock::now();
  kernels::set_gemm_threads(1);
  report_.kernels = fusion_.kernels.size();
  run.timed("kernels", [&] {
    for (const Kernel& k : fusion_.kernels)
      entries_.push_back(k.kind == KernelKind::gemm || k.kind == KernelKind::attention ||
                                 k.kind == KernelKind::collective
                             ? nullptr
                             : library.get(fusion_, k, report_));
  });
  run.dump("kernels", [&] { return report_.print(fusion_); });
  for (const Kernel& k : fusion_.kernels) {
    copies_.push_back(concat_copy(fusion_, k));
    gathers_.push_back(gather_copy(fusion_, k));
  }
  // Each collective is waited for right before the first kernel that reads its result.
  waits_before_.resize(fusion_.kernels.size() + 1);
  std::vector<std::size_t> waits = collective_waits(fusion_);
  for (std::size_t k = 0; k < waits.size(); ++k)
    if (fusion_.kernels[k].kind == KernelKind::collective) waits_before_[waits[k]].push_back(k);
  collective_ranks_ = collective_ranks(*graph_);
  report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  arena_.reset(static_cast<std::byte*>(
      ::operator new[](static_cast<std::size_t>(std::max<int64_t>(memory_.arena_bytes(), 1)),
                       std::align_val_t(MemoryPlan::alignment))));
}

CpuExecutable::CpuExecutable(const Graph& optimized, KernelLibrary& library, ThreadPool& pool)
    : CpuExecutable(optimized, library, pool, CompileRun("program", false, DumpSelection(""))) {}

CpuExecutable::CpuExecutable(const Graph& optimized, KernelLibrary& library, ThreadPool& pool,
                             CompileRun&& run)
    : CpuExecutable(
          prepare(optimized, cpu_backend.graph_stages(optimized, Device(Backend::cpu)), run),
          library, pool, run) {}

std::vector<HostTensor> CpuExecutable::run(std::span<const HostTensor> inputs) const {
  std::vector<HostTensor> results;
  for (const NamedValue& out : graph_->outputs())
    results.emplace_back(graph_->type(out.id).dtype, graph_->type(out.id).shape);
  run_into(inputs, results);
  return results;
}

void CpuExecutable::run_into(std::span<const HostTensor> inputs,
                             std::span<HostTensor> results) const {
  std::vector<const HostTensor*> pointers;
  for (const HostTensor& t : inputs)
    pointers.push_back(&t);
  run_into(pointers, results);
}

void CpuExecutable::run_into(std::span<const HostTensor* const> inputs,
                             std::span<HostTensor> results) const {
  std::lock_guard lock(run_mutex_);
  const Graph& g = *graph_;
  std::vector<void*> pointer(g.size(), nullptr);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    pointer[g.inputs()[i].id] = const_cast<std::byte*>(inputs[i]->bytes().data());
  for (const BufferSlot& slot : memory_.slots())
    pointer[slot.node] = arena_.get() + slot.offset;
  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    const TensorType& t = g.type(g.outputs()[i].id);
    // (A default HostTensor looks like an f32 scalar but owns no bytes.)
    if (results[i].dtype() != t.dtype || results[i].shape() != t.shape ||
        results[i].bytes().size() !=
            static_cast<std::size_t>(numel(t.shape)) * dtype_bytes(t.dtype))
      results[i] = HostTensor(t.dtype, t.shape);
  }
  // Kernel roots that are outputs write straight into the first result naming them.
  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    ValueId id = g.outputs()[i].id;
    if (g.node(id).op != OpId::input && !pointer[id]) pointer[id] = results[i].bytes().data();
  }

  Communicator* ranks = nullptr;
  std::vector<Communicator::Pending> pending;
  if (collective_ranks_ != 0) {
    ranks = &communicator();
    check_collective_ranks(collective_ranks_, *ranks);
    pending.assign(fusion_.kernels.size(), 0);
  }
  std::size_t in_flight = 0;
  std::vector<void*> args;
  const bool check_numerics = check_numerics_enabled();
  profile::ProgramRun profiled(
      profile_id_, label(), [&] { return describe_kernels(fusion_); },
      [&] { return profile::measure_cpu_peak(&pool_); });
  auto run_kernel = [&](std::size_t k) {
    const Kernel& kernel = fusion_.kernels[k];
    if (kernel.kind == KernelKind::collective) {
      pending[k] =
          start_collective(*ranks, g, kernel, pointer[kernel.reads[0]], pointer[kernel.root]);
      ++in_flight;
      return;
    }
    if (kernel.kind == KernelKind::attention) {
      run_attention(fusion_, kernel, pointer, pool_);
      return;
    }
    if (kernel.kind == KernelKind::gemm) {
      const Node& root = g.node(kernel.root);
      Shape a = g.type(kernel.gemm_a.logical).shape, c = root.type.shape;
      kernels::GemmShape s;
      s.m = c[c.size() - 2];
      s.n = c.back();
      s.k = kernel.gemm_a.transposed ? a[a.size() - 2] : a.back();
      s.trans_a = kernel.gemm_a.transposed;
      s.trans_b = kernel.gemm_b.transposed;
      int64_t batches = numel(c) / std::max<int64_t>(1, s.m * s.n);
      auto elem = static_cast<int64_t>(dtype_bytes(root.type.dtype));
      auto* pa = static_cast<std::byte*>(pointer[kernel.gemm_a.buffer]);
      auto* pb = static_cast<std::byte*>(pointer[kernel.gemm_b.buffer]);
      auto* pc = static_cast<std::byte*>(pointer[kernel.root]);
      // Row blocks of C run on the pool, each a single-threaded library GEMM.
      int64_t block = std::max<int64_t>(16, (s.m + static_cast<int64_t>(pool_.size()) - 1) /
                                                static_cast<int64_t>(pool_.size()));
      int64_t blocks = (s.m + block - 1) / block;
      pool_.parallel_for(batches * blocks, 1, [&](int64_t begin, int64_t end) {
        for (int64_t job = begin; job < end; ++job) {
          int64_t i = job / blocks, row = (job % blocks) * block;
          kernels::GemmShape part = s;
          part.m = std::min(block, s.m - row);
          part.lda = s.trans_a ? s.m : s.k;
          part.ldb = s.trans_b ? s.k : s.n;
          part.ldc = s.n;
          std::byte* a = pa + i * s.m * s.k * elem + (s.trans_a ? row : row * s.k) * elem;
          kernels::gemm(root.type.dtype, part, a, pb + i * s.k * s.n * elem,
                        pc + (i * s.m * s.n + row * s.n) * elem);
        }
      });
      return;
    }
    if (const std::optional<GatherCopy>& copy = gathers_[k]) {
      const void* indices = pointer[copy->indices];
      const bool wide = g.type(copy->indices).dtype == DType::i64;
      int64_t row_bytes = 0;
      for (const GatherCopy::Part& part : copy->parts)
        row_bytes += part.row_bytes;
      int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, row_bytes));
      pool_.parallel_for(copy->count, chunk, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          int64_t at = wide ? static_cast<const int64_t*>(indices)[i]
                            : static_cast<const int32_t*>(indices)[i];
          for (const GatherCopy::Part& part : copy->parts) {
            int64_t row = std::clamp<int64_t>(at, 0, part.table_rows - 1);
            std::memcpy(static_cast<std::byte*>(pointer[part.out]) + i * part.row_bytes,
                        static_cast<const std::byte*>(pointer[part.table]) + row * part.row_bytes,
                        static_cast<std::size_t>(part.row_bytes));
          }
        }
      });
      return;
    }
    if (const std::optional<ConcatCopy>& copy = copies_[k]) {
      auto* to = static_cast<std::byte*>(pointer[kernel.root]);
      for (int64_t o = 0; o < copy->outer; ++o)
        for (std::size_t i = 0; i < copy->sources.size(); ++i) {
          int64_t block = copy->block_bytes[i];
          std::memcpy(to, static_cast<const std::byte*>(pointer[copy->sources[i]]) + o * block,
                      static_cast<std::size_t>(block));
          to += block;
        }
      return;
    }
    args.clear();
    for (ValueId out : kernel.outputs())
      args.push_back(pointer[out]);
    for (ValueId r : kernel.reads)
      args.push_back(pointer[r]);
    int64_t range = parallel_range(g, kernel);
    int64_t chunk = std::max<int64_t>(1, elements_per_chunk / work_per_step(g, kernel));
    KernelEntry entry = entries_[k];
    pool_.parallel_for(range, chunk, [&](int64_t begin, int64_t end) {
      run_kernel_entry(entry, args.data(), begin, end);
    });
  };
  for (std::size_t k = 0; k < fusion_.kernels.size(); ++k) {
    for (std::size_t started : waits_before_[k]) {
      profiled.begin(started); // a collective's wait counts as its own time
      ranks->wait(pending[started]);
      profiled.end(started);
      --in_flight;
    }
    if (in_flight) ranks->progress();
    profiled.begin(k);
    run_kernel(k);
    profiled.end(k);
    if (check_numerics && fusion_.kernels[k].kind != KernelKind::collective)
      check_kernel_numerics(fusion_, k, pointer);
  }

  for (std::size_t started : waits_before_[fusion_.kernels.size()]) {
    profiled.begin(started);
    ranks->wait(pending[started]);
    profiled.end(started);
  }

  // Outputs no kernel wrote: graph inputs passed through, and repeated outputs.
  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    ValueId id = g.outputs()[i].id;
    void* source = pointer[id];
    if (source == results[i].bytes().data()) continue;
    std::memcpy(results[i].bytes().data(), source, results[i].bytes().size());
  }
}

namespace {

BackendGraphStages cpu_graph_stages(const Graph& optimized, const Device&) {
  BackendGraphStages out;
  out.fusion = FusionOptions{.row_kernels = true, .sibling_reductions = true};
  if (has_fused_attention(optimized) && attention_decomposition_requested()) {
    static std::once_flag said;
    std::call_once(said, [] {
      log_line("sinter: attention on cpu: decomposed (SINTER_ATTENTION=decomposed)");
    });
    out.stages.push_back(
        {"decompose-attention", [](Graph g) { return decompose(g, is_fused_attention); }});
  }
  out.stages.push_back({"small-matmuls", [](Graph g) { return small_matmuls_as_reductions(g); }});
  // The CPU kernels write head-major results, one gradient per node: the token-major and packed
  // layouts (the CUDA pipeline's) run as those and the views that lay them out.
  bool other_layout = false;
  for (ValueId id = 0; id < optimized.size() && !other_layout; ++id)
    other_layout = attention_attrs::writes_token_major(optimized.node(id)) ||
                   attention_attrs::writes_packed(optimized.node(id));
  if (other_layout)
    out.stages.push_back({"attention-views", [](Graph g) { return head_major_attention(g); }});
  return out;
}

std::unique_ptr<Executable> compile_for_cpu(Prepared prepared, const Device&, Context& context,
                                            CompileRun& run) {
  auto executable =
      std::make_unique<CpuExecutable>(std::move(prepared), context.kernels(), context.pool(), run);
  context.cache().record_run_stats();
  return executable;
}

StepMemory plan_memory_for_cpu(const Prepared& prepared, const Device&,
                               std::span<const InputKeeping>) {
  const Graph& graph = *prepared.graph;
  const MemoryPlan& memory = prepared.memory;
  StepMemory out;
  out.arena = memory.arena_bytes();
  out.outputs = memory.peak_bytes() - memory.arena_bytes();
  out.inputs = input_bytes(graph);
  std::vector<PlannedBuffer> buffers = arena_buffers(graph, memory);
  for (const NamedValue& in : graph.inputs())
    buffers.push_back({"input: " + in.name + " " + to_string(graph.type(in.id)),
                       static_cast<int64_t>(byte_size(graph.type(in.id)))});
  out.largest = largest_buffers(std::move(buffers));
  return out;
}

} // namespace

extern const BackendEntry cpu_backend{Backend::cpu,     "cpu",           false,
                                      cpu_graph_stages, compile_for_cpu, plan_memory_for_cpu,
                                      host_free_memory};

} // namespace sinter
