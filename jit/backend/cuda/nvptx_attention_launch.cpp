// jit/backend/cuda/nvptx_attention_launch.cpp — which attention nodes the NVPTX kernels take, and
// how their kernels launch: the outputs each writes and its blocks
#include "jit/backend/cuda/nvptx_attention.hpp"
#include "jit/backend/cuda/nvptx_attention_tiling.hpp"
#include "ops/attention_attrs.hpp"

#include <algorithm>
#include <string>

namespace sinter {
namespace attention_tiling {

OutputPositions output_positions(const Graph& g, const Kernel& kernel) {
  OutputPositions out;
  std::vector<ValueId> outputs = kernel.outputs();
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Node& n = g.node(outputs[i]);
    int position = static_cast<int>(i);
    if (n.op == OpId::fused_attention)
      out.o = position;
    else if (n.op == OpId::fused_attention_lse)
      out.lse = position;
    else if (attention_attrs::writes_packed(n))
      out.dq = out.dk = out.dv = position; // one value, its parts placed by the layout
    else
      (n.attrs.ints[0] == attention_attrs::grad_q   ? out.dq
       : n.attrs.ints[0] == attention_attrs::grad_k ? out.dk
                                                    : out.dv) = position;
  }
  return out;
}

WorkItems work_items(const AttentionLayout& l, const OutputPositions& out) {
  int64_t query_blocks = l.batches * ceil_div(l.tq, block_rows);
  if (!l.backward) return {0, query_blocks};
  return {out.key_side() ? l.batches * ceil_div(l.tk, block_rows) : 0,
          out.dq >= 0 ? query_blocks : 0};
}

} // namespace attention_tiling

using namespace attention_tiling;

std::string nvptx_attention_unsupported(std::span<const TensorType> operands, int capability) {
  DType t = operands[0].dtype;
  if (t != DType::bf16 && t != DType::f16)
    return "the fused CUDA kernels run on tensor cores in bf16 or f16, and these operands are " +
           std::string(dtype_name(t)) + " (train with --amp bf16 or fp16 to use them)";
  if (capability < min_capability)
    return "the fused CUDA kernels need mma.sync m16n8k16 (sm_80 or newer), and this GPU is sm_" +
           std::to_string(capability);
  int64_t d = operands[0].shape.back(), dv = operands[2].shape.back();
  if (d > max_head_dim || dv > max_head_dim)
    return "the fused CUDA kernels take feature dims up to " + std::to_string(max_head_dim) +
           ", and these are " + std::to_string(d) + " and " + std::to_string(dv);
  return {};
}

GpuLaunch nvptx_attention_launch(const Graph& g, const Kernel& kernel) {
  WorkItems items =
      work_items(attention_layout(g, g.node(kernel.root)), output_positions(g, kernel));
  GpuLaunch launch;
  launch.strategy = GpuStrategy::attention;
  launch.threads = threads_per_block;
  launch.items = items.key_side + items.query_side;
  launch.blocks = std::clamp<int64_t>(launch.items, 1, max_grid);
  return launch;
}

} // namespace sinter
