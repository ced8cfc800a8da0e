// jit/backend/cuda/gpu_launch.cpp — how a fused kernel's work maps to a CUDA grid: strategy,
// threads, blocks and elements per thread for each kind of generated kernel
#include "jit/backend/cuda/gpu_launch.hpp"

#include "jit/backend/cuda/nvptx_attention.hpp"
#include "jit/settings.hpp"

#include <algorithm>
#include <stdexcept>

namespace sinter {

bool gpu_deterministic() { return switch_setting("SINTER_DETERMINISTIC", false); }

namespace {

/// A column reduction's neighbouring outputs a lane: 16 bytes of the narrowest buffer it reads
/// rows of (more elements than a row, and more than one along its last dim: not a bias, a
/// scale or a row's statistic), dividing the columns, with every lane's partials in shared
/// memory. Each element's index is computed on its own, so a buffer whose last dim the width
/// does not divide (q, k and v's gradients [.., heads, 64] summed as [.., 2304] do divide) is
/// still read right, only in narrower loads.
int64_t column_vector_width(const Graph& g, const Kernel& k) {
  const Shape& s = g.node(k.root).type.shape;
  if (s.empty()) return 1;
  int64_t columns = s.back();
  std::size_t narrowest = 0;
  for (ValueId v : k.reads) {
    const Shape& shape = g.type(v).shape;
    if (shape.empty() || numel(shape) <= columns || shape.back() == 1) continue;
    std::size_t bytes = dtype_bytes(g.type(v).dtype);
    narrowest = narrowest == 0 ? bytes : std::min(narrowest, bytes);
  }
  if (narrowest == 0) return 1;
  auto partials = static_cast<int64_t>(k.outputs().size());
  int64_t width = std::min<int64_t>(8, 16 / static_cast<int64_t>(narrowest));
  while (width > 1 &&
         (columns % width != 0 || gpu_column_partials_bytes(gpu_column_vector_threads, width,
                                                            partials) > gpu_column_shared_bytes))
    width /= 2;
  return std::max<int64_t>(1, width);
}

} // namespace

GpuLaunch gpu_launch(const Graph& g, const Kernel& k) {
  constexpr int64_t max_blocks = gpu_max_blocks;
  GpuLaunch launch;
  auto blocks_for = [&](int64_t threads) {
    return std::clamp<int64_t>((threads + launch.threads - 1) / launch.threads, 1, max_blocks);
  };
  const Node& root = g.node(k.root);
  Shape s = root.type.shape;
  switch (k.kind) {
  case KernelKind::loop: {
    int64_t inner = s.empty() ? 1 : s.back();
    int64_t width = std::max<int64_t>(1, 16 / static_cast<int64_t>(dtype_bytes(root.type.dtype)));
    while (width > 1 && inner % width != 0)
      width /= 2;
    if (numel(s) / width <= launch.threads && k.outputs().size() > gpu_narrow_loop_outputs)
      width = 1; // `width` times the warps for a pass bound by its arithmetic
    launch.vector_width = width;
    launch.items = numel(s) / width;
    launch.blocks = blocks_for(launch.items);
    return launch;
  }
  case KernelKind::reduce: {
    Shape xs = g.type(root.inputs[0]).shape;
    bool contiguous = reduces_last_axis(g, k);
    int64_t outputs = numel(s), reduced = numel(xs) / std::max<int64_t>(1, outputs);
    launch.items = outputs;
    int64_t width = contiguous ? 1 : column_vector_width(g, k);
    bool vectors = width > 1 && reduced >= gpu_column_vector_min_rows &&
                   (outputs + 32 * width - 1) / (32 * width) >= gpu_column_vector_min_blocks;
    if (vectors || (!contiguous && reduced >= 64)) {
      // 32 lanes a block, each `vector_width` neighbouring outputs.
      launch.strategy = GpuStrategy::column_split;
      launch.threads = vectors ? gpu_column_vector_threads : 1024;
      launch.vector_width = vectors ? width : 1;
      int64_t tile = 32 * launch.vector_width;
      launch.blocks = std::clamp<int64_t>((outputs + tile - 1) / tile, 1, max_blocks);
    } else if (!contiguous || reduced < 32) {
      launch.strategy = GpuStrategy::thread_per_output;
      launch.blocks = blocks_for(outputs);
    } else if (reduced < 1024) {
      launch.strategy = GpuStrategy::warp_per_output;
      launch.blocks = blocks_for(outputs * 32);
    } else {
      launch.strategy = GpuStrategy::block_per_output;
      launch.blocks = std::clamp<int64_t>(outputs, 1, max_blocks);
    }
    return launch;
  }
  case KernelKind::scatter_add: {
    std::size_t bytes = dtype_bytes(root.type.dtype);
    if (root.type.dtype == DType::boolean) {
      launch.strategy = GpuStrategy::serial_scatter;
      launch.items = 1;
      launch.threads = 1;
      return launch;
    }
    if (bytes < 4 || gpu_deterministic()) { // no atomics on 16-bit words; none at all asked
      int64_t rows = std::max<int64_t>(1, s.empty() ? 1 : s[0]);
      launch.strategy = GpuStrategy::owned_scatter;
      launch.owned_rows = (rows + gpu_owned_scatter_blocks - 1) / gpu_owned_scatter_blocks;
      launch.blocks = (rows + launch.owned_rows - 1) / launch.owned_rows;
      launch.items = numel(s); // every output element is written, updates or not
      return launch;
    }
    launch.strategy = GpuStrategy::atomic_scatter;
    launch.items = numel(g.type(root.inputs[1]).shape);
    launch.blocks = blocks_for(launch.items);
    launch.zero_output_first = true;
    return launch;
  }
  case KernelKind::row: {
    RowLayout layout = row_layout(g, k);
    int64_t length = layout.length, rows = layout.rows;
    // Consecutive elements per thread, as wide as the narrowest buffer allows 16 bytes.
    std::size_t narrowest = 8;
    for (ValueId v : k.outputs())
      narrowest = std::min(narrowest, dtype_bytes(g.type(v).dtype));
    for (ValueId v : k.reads)
      if (g.type(v).shape.size() && g.type(v).shape.back() == length)
        narrowest = std::min(narrowest, dtype_bytes(g.type(v).dtype));
    int64_t width =
        std::min<int64_t>(8, 16 / static_cast<int64_t>(std::max<std::size_t>(1, narrowest)));
    while (width > 1 && length % width != 0)
      width /= 2;
    launch.vector_width = width;
    launch.items = rows;
    if (!layout.partials.empty()) { // a group of rows a block, a row a warp (NvptxBody::row)
      // Groups are at most gpu_row_groups (split_column_reductions); only the instance of a
      // kernel with its group count as a runtime size counts more, and only its vector width
      // is read (sized_launch).
      launch.strategy = GpuStrategy::warp_per_output;
      launch.blocks = rows / layout.group;
      if (static_cast<int64_t>(layout.partials.size()) * length > gpu_row_partial_max_values ||
          rows % layout.group != 0)
        throw std::logic_error("sinter: a row kernel's column partials do not fit the grid");
    } else if (length <= gpu_warp_row_limit) {
      launch.strategy = GpuStrategy::warp_per_output;
      launch.blocks = blocks_for(rows * 32);
    } else {
      launch.strategy = GpuStrategy::block_per_output;
      launch.threads = 512;
      launch.blocks = std::clamp<int64_t>(rows, 1, max_blocks);
      launch.shared_bytes = gpu_row_cache(g, k).bytes;
    }
    return launch;
  }
  case KernelKind::attention: return nvptx_attention_launch(g, k);
  case KernelKind::gemm:
  case KernelKind::collective: break;
  }
  throw std::logic_error("sinter: gemm and collective kernels are library calls, not GPU launches");
}

RowCache gpu_row_cache(const Graph& g, const Kernel& k) {
  RowCache cache;
  if (k.kind != KernelKind::row) return cache;
  RowLayout layout = row_layout(g, k);
  std::size_t passes = layout.passes.size() + (layout.full.empty() ? 0 : 1);
  if (layout.length <= gpu_warp_row_limit || passes < 2 || !layout.partials.empty()) return cache;
  for (ValueId r : k.reads) {
    const TensorType& t = g.type(r);
    if (t.shape.empty() || t.shape.back() != layout.length ||
        numel(t.shape) != layout.rows * layout.length)
      continue; // not whole rows: read at a row's value, or broadcast along it
    cache.buffers.emplace_back(r, cache.bytes);
    cache.bytes += (layout.length * static_cast<int64_t>(dtype_bytes(t.dtype)) + 15) / 16 * 16;
  }
  if (cache.bytes > gpu_row_cache_max_bytes) return RowCache{};
  return cache;
}

} // namespace sinter
