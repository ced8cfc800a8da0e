// jit/runtime/cpu_executable.cpp — kernel launches over a static arena, GEMMs through the bridge
#include "jit/runtime/cpu_executable.hpp"

#include "jit/codegen/emitter.hpp"
#include "kernels/blas_gemm.hpp"

#include <chrono>
#include <cstring>
#include <new>

namespace sinter {
namespace {

/// Chunks of at least this many elements are worth handing to another thread.
constexpr int64_t elements_per_chunk = 1 << 14;

} // namespace

CpuExecutable::CpuExecutable(Graph graph, KernelLibrary& library, ThreadPool& pool)
    : graph_(std::make_unique<Graph>(std::move(graph))), fusion_(fuse(*graph_)), memory_(fusion_),
      pool_(pool) {
  auto start = std::chrono::steady_clock::now();
  report_.kernels = fusion_.kernels.size();
  for (const Kernel& k : fusion_.kernels)
    entries_.push_back(k.kind == KernelKind::gemm ? nullptr : library.get(fusion_, k, report_));
  report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  arena_.reset(
      new (std::align_val_t(MemoryPlan::alignment))
          std::byte[static_cast<std::size_t>(std::max<int64_t>(memory_.arena_bytes(), 1))]);
}

std::vector<HostTensor> CpuExecutable::run(std::span<const HostTensor> inputs) const {
  std::lock_guard lock(run_mutex_);
  const Graph& g = *graph_;
  std::vector<HostTensor> results;
  std::vector<void*> pointer(g.size(), nullptr);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    pointer[g.inputs()[i].id] = const_cast<std::byte*>(inputs[i].bytes().data());
  for (const BufferSlot& slot : memory_.slots())
    pointer[slot.node] = arena_.get() + slot.offset;
  std::vector<bool> written(g.size(), false);
  for (const NamedValue& out : g.outputs())
    results.emplace_back(g.type(out.id).dtype, g.type(out.id).shape);
  // Kernel roots that are outputs write straight into the first result naming them.
  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    ValueId id = g.outputs()[i].id;
    if (g.node(id).op != OpId::input && !pointer[id]) pointer[id] = results[i].bytes().data();
  }

  std::vector<void*> args;
  for (std::size_t k = 0; k < fusion_.kernels.size(); ++k) {
    const Kernel& kernel = fusion_.kernels[k];
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
      for (int64_t i = 0; i < batches; ++i)
        kernels::gemm(root.type.dtype, s, pa + i * s.m * s.k * elem, pb + i * s.k * s.n * elem,
                      pc + i * s.m * s.n * elem);
      continue;
    }
    args.assign({pointer[kernel.root]});
    for (ValueId r : kernel.reads)
      args.push_back(pointer[r]);
    int64_t range = parallel_range(g, kernel);
    int64_t chunk = std::max<int64_t>(1, elements_per_chunk / work_per_step(g, kernel));
    KernelEntry entry = entries_[k];
    pool_.parallel_for(range, chunk,
                       [&](int64_t begin, int64_t end) { entry(args.data(), begin, end); });
  }

  // Outputs no kernel wrote: graph inputs passed through, and repeated outputs.
  for (std::size_t i = 0; i < g.outputs().size(); ++i) {
    ValueId id = g.outputs()[i].id;
    void* source = pointer[id];
    if (source == results[i].bytes().data()) continue;
    std::memcpy(results[i].bytes().data(), source, results[i].bytes().size());
  }
  return results;
}

} // namespace sinter
