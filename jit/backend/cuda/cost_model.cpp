// jit/backend/cuda/cost_model.cpp — the cost model's terms and constants, fitted to the kernels
// of a GPT-2 small bf16 step and a ViT-B/16→S/16 distillation step measured on an H100
// (tests/data/h100_*_kernels.tsv, 2026-11-27) and to attention timed on an H200 (2026-11-29)
#include "jit/backend/cuda/cost_model.hpp"
#include "jit/passes/fuse.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace sinter {
namespace {

// Shares of the nominal rates a GPU sustains (an H100: 2.95 of 3.35 TB/s, 853 of 1070 TFLOP/s).
constexpr double sustained_bandwidth = 0.88;
constexpr double sustained_flops = 0.8;

/// Dense bf16 tensor-core FLOPs per clock per SM, and FMA-lane FLOPs, by architecture.
std::pair<double, double> per_sm_flops(int compute_capability) {
  if (compute_capability >= 100) return {8192, 256};
  if (compute_capability >= 90) return {4096, 256};
  if (compute_capability == 80) return {2048, 128};
  if (compute_capability >= 80) return {1024, 256}; // sm_86, sm_89
  return {1024, 128};
}

// Fitted on the H100 steps (see the file comment); each is a share of a GpuRates figure.
constexpr double loop_memory_share = 0.74; ///< elementwise loops, 16-byte vectors
constexpr double merged_loop_share = 0.75; ///< and of that, loops writing many buffers (AdamW)
constexpr int64_t merged_loop_outputs = 8; ///< "many": more outputs than this
constexpr double row_memory_share = 0.75;  ///< a warp per row, reductions first
/// A block per row, each pass over the row read again (reread_bytes): GPT-2's log-sum-exp over
/// 824 MB of logits, two passes, took 563 µs, the copy rate for both.
constexpr double block_row_memory_share = 1.0;
constexpr double reduce_memory_share = 0.24; ///< a warp or block per output
constexpr double scatter_memory_share = 0.6; ///< atomic adds
/// An owned scatter's tile of indices: a load from L2, a ballot and two barriers (assumed, not
/// yet measured on a GPU). A wave of blocks walks every tile.
constexpr double owned_scatter_tile_seconds = 1.0e-6;
/// A column reduction's 1024 threads, a column a lane and a row in flight each: their share of
/// the bandwidth; more rows or columns in flight a thread, proportionally more (assumed).
constexpr double column_block_share = 0.0015;
constexpr double column_memory_share = 0.38; ///< all of them (64-byte rows of 32 columns)
/// Lanes loading 16 bytes of neighbouring columns: the loops' share for the same loads (assumed
/// until a GPU measures it).
constexpr double column_vector_memory_share = loop_memory_share;
constexpr double gemm_flops_share = 0.855; ///< cuBLASLt at GPT-2's and ViT's shapes
constexpr double gemm_overhead_seconds = 8e-6;
/// Fused attention: a share of the tensor-core rate for its FLOPs, plus a fixed cost per block
/// of sinter's NVPTX grid (loading the query tile, the last softmax pass, the stores, and at
/// short sequences the padded rows of the last tile: at T=196 the blocks cost as much as the
/// FLOPs). Fitted on the timed trials of an H200 (2026-11-29;
/// tests/data/h200_attention_kernels.tsv: GPT-2's T=1024 causal layer, the ViT pair's T=196 ones),
/// sinter's restructured kernels and cuDNN's fused SDPA alike; cuDNN's grid is not known, so its
/// per-block cost is per block of the NVPTX grid for the same shape, and its FLOPs are only the
/// scores a causal mask keeps.
constexpr double attention_flops_share = 0.56;
constexpr double attention_gradient_flops_share = 0.54;
constexpr double attention_block_sm_seconds = 2.0e-6; ///< a block's fixed cost on its SM
constexpr double attention_gradient_block_sm_seconds = 4.0e-6;
constexpr double cudnn_attention_flops_share = 0.36;
constexpr double cudnn_attention_gradient_flops_share = 0.31;
constexpr double cudnn_attention_block_sm_seconds = 1.1e-6;
constexpr double cudnn_attention_gradient_block_sm_seconds = 1.7e-6;
/// FMA-lane operations per element: a libdevice transcendental or an IEEE division or root, and
/// any other node (index arithmetic included).
constexpr double transcendental_cost = 53;
constexpr double loop_arithmetic_cost = 2.3;
/// A loop's arithmetic runs at full rate from this many resident warps on every SM; a small
/// grid (one block for 17 merged [768] updates: 33–41 µs measured) at its share of them.
constexpr double loop_full_rate_warps_per_sm = 32;
constexpr double row_transcendental_cost = 35;

bool is_transcendental(OpId op) {
  switch (op) {
  case OpId::exp:
  case OpId::log:
  case OpId::tanh:
  case OpId::erf:
  case OpId::pow:
  case OpId::div:
  case OpId::sqrt:
  case OpId::rsqrt: return true;
  default: return false;
  }
}

const char* strategy_name(GpuStrategy s) {
  switch (s) {
  case GpuStrategy::elementwise: return "elementwise";
  case GpuStrategy::thread_per_output: return "thread_per_output";
  case GpuStrategy::column_split: return "column_split";
  case GpuStrategy::warp_per_output: return "warp_per_output";
  case GpuStrategy::block_per_output: return "block_per_output";
  case GpuStrategy::atomic_scatter: return "atomic_scatter";
  case GpuStrategy::owned_scatter: return "owned_scatter";
  case GpuStrategy::serial_scatter: return "serial_scatter";
  case GpuStrategy::attention: return "attention";
  }
  return "?";
}

} // namespace

std::string describe(const KernelWork& w) {
  char text[320];
  std::snprintf(text, sizeof text,
                "kind=%s strategy=%s gradient=%d tensor_cores=%d blocks=%lld threads=%lld "
                "bytes=%lld flops=%lld elements=%lld transcendental=%lld arithmetic=%lld "
                "outputs=%lld",
                kernel_kind_name(w.kind), strategy_name(w.strategy), w.gradient ? 1 : 0,
                w.tensor_cores ? 1 : 0, static_cast<long long>(w.blocks),
                static_cast<long long>(w.threads), static_cast<long long>(w.bytes),
                static_cast<long long>(w.flops), static_cast<long long>(w.elements),
                static_cast<long long>(w.transcendental), static_cast<long long>(w.arithmetic),
                static_cast<long long>(w.outputs));
  return std::string(text) + (w.cudnn ? " library=cudnn" : "") +
         (w.rows_in_flight != 1 ? " rows_in_flight=" + std::to_string(w.rows_in_flight) : "") +
         (w.vector_width != 1 ? " vector_width=" + std::to_string(w.vector_width) : "") +
         (w.reread_bytes != 0 ? " reread_bytes=" + std::to_string(w.reread_bytes) : "") +
         (w.scan_tiles != 0 ? " scan_tiles=" + std::to_string(w.scan_tiles) : "") +
         (w.epilogue_bytes != 0 ? " epilogue_bytes=" + std::to_string(w.epilogue_bytes) : "");
}

std::optional<KernelWork> parse_work(std::string_view text) {
  KernelWork w;
  std::map<std::string, std::string, std::less<>> fields;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view field = text.substr(at, end - at);
    std::size_t eq = field.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    fields.emplace(std::string(field.substr(0, eq)), std::string(field.substr(eq + 1)));
    at = end + 1;
  }
  auto number = [&](const char* key, int64_t& into) {
    auto it = fields.find(key);
    if (it == fields.end()) return false;
    char* end = nullptr;
    into = std::strtoll(it->second.c_str(), &end, 10);
    return end && *end == '\0' && !it->second.empty();
  };
  int64_t gradient = 0, tensor = 0;
  bool ok = number("gradient", gradient) && number("tensor_cores", tensor) &&
            number("blocks", w.blocks) && number("threads", w.threads) &&
            number("bytes", w.bytes) && number("flops", w.flops) &&
            number("elements", w.elements) && number("transcendental", w.transcendental) &&
            number("arithmetic", w.arithmetic) && number("outputs", w.outputs);
  if (fields.contains("rows_in_flight"))
    ok = ok && number("rows_in_flight", w.rows_in_flight) && w.rows_in_flight >= 1;
  if (fields.contains("vector_width"))
    ok = ok && number("vector_width", w.vector_width) && w.vector_width >= 1;
  if (fields.contains("reread_bytes"))
    ok = ok && number("reread_bytes", w.reread_bytes) && w.reread_bytes >= 0;
  if (fields.contains("scan_tiles"))
    ok = ok && number("scan_tiles", w.scan_tiles) && w.scan_tiles >= 0;
  if (fields.contains("epilogue_bytes"))
    ok = ok && number("epilogue_bytes", w.epilogue_bytes) && w.epilogue_bytes >= 0;
  auto library = fields.find("library");
  if (library != fields.end()) {
    if (library->second != "cudnn") return std::nullopt;
    w.cudnn = true;
  }
  auto kind = fields.find("kind");
  auto strategy = fields.find("strategy");
  if (!ok || kind == fields.end() || strategy == fields.end()) return std::nullopt;
  bool known = false;
  for (int k = 0; k <= static_cast<int>(KernelKind::collective); ++k)
    if (kind->second == kernel_kind_name(static_cast<KernelKind>(k))) {
      w.kind = static_cast<KernelKind>(k);
      known = true;
    }
  if (!known) return std::nullopt;
  known = false;
  for (int s = 0; s <= static_cast<int>(GpuStrategy::attention); ++s)
    if (strategy->second == strategy_name(static_cast<GpuStrategy>(s))) {
      w.strategy = static_cast<GpuStrategy>(s);
      known = true;
    }
  w.gradient = gradient != 0;
  w.tensor_cores = tensor != 0;
  return known ? std::optional<KernelWork>(w) : std::nullopt;
}

GpuRates gpu_rates(const cuda::DeviceInfo& device) {
  GpuRates rates;
  rates.name = device.name;
  rates.multiprocessors = device.multiprocessors;
  rates.bytes_per_second =
      sustained_bandwidth * 2.0 * device.memory_clock_khz * 1e3 * (device.memory_bus_bits / 8.0);
  auto [tensor, fma] = per_sm_flops(device.compute_capability);
  double clock = device.clock_khz * 1e3 * device.multiprocessors * sustained_flops;
  rates.tensor_flops = clock * tensor;
  rates.fp32_flops = clock * fma;
  return rates;
}

double causal_scores_share(int64_t tq, int64_t tk) {
  if (tq <= 0 || tk <= 0) return 1.0;
  const auto q = static_cast<double>(tq), k = static_cast<double>(tk);
  double seen = q <= k ? q * (q + 1) / 2 : k * (k + 1) / 2 + (q - k) * k;
  return seen / (q * k);
}

namespace {

/// Row kernels: the body nodes computed once per row, not per element (a row's reductions and
/// what follows from them alone: a log-sum-exp's log), so that the arithmetic per element
/// counts only what varies along the row. A node varies when it is as long as the row in its
/// last dim and is a loaded buffer, an iota, or computed from a node that varies.
std::vector<bool> row_invariant_nodes(const FusionPlan& plan, const Kernel& kernel) {
  const Graph& g = *plan.graph;
  std::vector<bool> invariant(g.size(), false);
  if (kernel.kind != KernelKind::row) return invariant;
  const int64_t length = row_layout(g, kernel).length;
  std::vector<bool> varies(g.size(), false);
  for (ValueId v : kernel.reads)
    varies[v] = true;
  for (ValueId v : kernel.body) { // in graph order: operands first
    const Node& n = g.node(v);
    bool row_long = !n.type.shape.empty() && n.type.shape.back() == length;
    bool source = plan.loads(kernel, v) || n.op == OpId::iota;
    bool from_varying = std::any_of(n.inputs.begin(), n.inputs.end(), [&](ValueId in) {
      return varies[in] && !is_row_reduction(g, v);
    });
    varies[v] = row_long && (source || from_varying);
    invariant[v] = !varies[v] && !is_row_reduction(g, v); // a fold is work per element
  }
  return invariant;
}

/// Body nodes that repeat an earlier one of the kernel (the same op, type and attributes on the
/// same operands, up to such repeats): a value recomputed on purpose beside its original (the
/// GELU that a backward recomputes for its weight gradient, where the GELU's derivative already
/// computes its tanh). LLVM computes them once, so they add no work.
std::vector<bool> repeated_nodes(const Graph& g, const Kernel& kernel) {
  std::vector<bool> repeated(g.size(), false);
  std::map<ValueId, ValueId> original;
  auto same = [&](ValueId v) {
    auto it = original.find(v);
    return it == original.end() ? v : it->second;
  };
  std::multimap<OpId, ValueId> firsts;
  for (ValueId v : kernel.body) {
    const Node& n = g.node(v);
    auto [begin, end] = firsts.equal_range(n.op);
    for (auto it = begin; it != end && !repeated[v]; ++it) {
      const Node& m = g.node(it->second);
      if (m.type != n.type || !(m.attrs == n.attrs) || m.inputs.size() != n.inputs.size()) continue;
      if (std::equal(m.inputs.begin(), m.inputs.end(), n.inputs.begin(),
                     [&](ValueId a, ValueId b) { return same(a) == same(b); })) {
        original[v] = it->second;
        repeated[v] = true;
      }
    }
    if (!repeated[v]) firsts.emplace(n.op, v);
  }
  return repeated;
}

} // namespace

std::vector<KernelWork> plan_work(const FusionPlan& plan, std::span<const GpuLaunchStep> launches,
                                  std::span<const profile::KernelInfo> infos) {
  const Graph& g = *plan.graph;
  std::vector<KernelWork> out;
  for (const GpuLaunchStep& launch : launches) {
    const Kernel& kernel = plan.kernels[launch.kernel];
    const profile::KernelInfo& info = infos[launch.kernel];
    KernelWork w;
    w.name = info.name;
    w.kind = launch.kind;
    w.strategy = launch.shape.strategy;
    w.blocks = launch.shape.blocks;
    w.threads = launch.shape.threads;
    w.bytes = info.bytes;
    w.flops = info.flops;
    w.gradient = g.node(kernel.root).op == OpId::fused_attention_grad;
    w.cudnn = launch.cudnn.has_value();
    if (w.cudnn && launch.cudnn->shape.causal) // cuDNN skips the masked tiles
      w.flops =
          static_cast<int64_t>(static_cast<double>(w.flops) *
                               causal_scores_share(launch.cudnn->shape.tq, launch.cudnn->shape.tk));
    w.tensor_cores = launch.kind == KernelKind::gemm &&
                     (launch.gemm.dtype == DType::bf16 || launch.gemm.dtype == DType::f16);
    w.outputs = static_cast<int64_t>(kernel.outputs().size());
    if (launch.aux_node)
      w.epilogue_bytes = static_cast<int64_t>(byte_size(g.type(*launch.aux_node)));
    if (w.strategy == GpuStrategy::column_split) {
      w.rows_in_flight = gpu_column_split_unroll;
      w.vector_width = launch.shape.vector_width;
    }
    if (w.strategy == GpuStrategy::owned_scatter)
      w.scan_tiles = (numel(g.type(g.node(kernel.root).inputs[0]).shape) + w.threads - 1) /
                     std::max<int64_t>(1, w.threads);
    if (launch.kind == KernelKind::row && w.strategy == GpuStrategy::block_per_output &&
        launch.shape.shared_bytes == 0) {
      // Each pass reads what the kernel reads (its bytes less what it writes): one per group
      // of reductions (RowLayout::passes), and one more where it writes whole rows; unless
      // the rows are kept in shared memory by the first pass (gpu_row_cache).
      RowLayout layout = row_layout(g, kernel);
      auto passes = static_cast<int64_t>(layout.passes.size() + (layout.full.empty() ? 0 : 1));
      int64_t written = 0;
      for (ValueId out : kernel.outputs())
        written += static_cast<int64_t>(byte_size(g.type(out)));
      w.reread_bytes = std::max<int64_t>(0, passes - 1) * std::max<int64_t>(0, w.bytes - written);
    }
    for (ValueId out_id : kernel.outputs())
      w.elements = std::max(w.elements, numel(g.type(out_id).shape));
    std::vector<bool> per_row = row_invariant_nodes(plan, kernel);
    std::vector<bool> repeated = repeated_nodes(g, kernel);
    for (ValueId v : kernel.body)
      if (!per_row[v] && !repeated[v])
        (is_transcendental(g.node(v).op) ? w.transcendental : w.arithmetic) += 1;
    out.push_back(std::move(w));
  }
  return out;
}

KernelPrediction predict_kernel(const KernelWork& w, const GpuRates& r) {
  auto memory = [&](double share) {
    return static_cast<double>(w.bytes) / (r.bytes_per_second * share);
  };
  // Blocks resident on the whole device at once: 2048 threads an SM.
  const int64_t wave_blocks = static_cast<int64_t>(std::max(1, r.multiprocessors)) *
                              std::max<int64_t>(1, 2048 / std::max<int64_t>(1, w.threads));
  auto arithmetic = [&](double transcendental, double other) {
    return static_cast<double>(w.elements) *
           (transcendental * static_cast<double>(w.transcendental) +
            other * static_cast<double>(w.arithmetic)) /
           r.fp32_flops;
  };
  // The larger of two terms, named; then the launch floor of a kernel in a CUDA graph.
  auto pick = [&](double a, const char* a_name, double b, const char* b_name) {
    KernelPrediction p = a >= b ? KernelPrediction{a, a_name} : KernelPrediction{b, b_name};
    p.seconds += r.launch_seconds;
    return p;
  };
  switch (w.kind) {
  case KernelKind::gemm: {
    double rate = (w.tensor_cores ? r.tensor_flops : r.fp32_flops) * gemm_flops_share;
    // An epilogue's matrix of GELU inputs: assumed streamed after the products, at the loops'
    // share of the bandwidth (not measured).
    return {static_cast<double>(w.flops) / rate + gemm_overhead_seconds +
                static_cast<double>(w.epilogue_bytes) / (r.bytes_per_second * loop_memory_share),
            "tensor cores"};
  }
  case KernelKind::attention: {
    double share =
        w.cudnn ? (w.gradient ? cudnn_attention_gradient_flops_share : cudnn_attention_flops_share)
                : (w.gradient ? attention_gradient_flops_share : attention_flops_share);
    double per_block =
        w.cudnn ? (w.gradient ? cudnn_attention_gradient_block_sm_seconds
                              : cudnn_attention_block_sm_seconds)
                : (w.gradient ? attention_gradient_block_sm_seconds : attention_block_sm_seconds);
    return {static_cast<double>(w.flops) / (r.tensor_flops * share) +
                static_cast<double>(w.blocks) * per_block / r.multiprocessors + r.launch_seconds,
            "attention"};
  }
  case KernelKind::loop: {
    // A loop writing dozens of buffers (a merged optimizer update) streams them less well.
    double share = loop_memory_share * (w.outputs > merged_loop_outputs ? merged_loop_share : 1.0);
    double threads = static_cast<double>(
        std::max<int64_t>(1, std::min(w.blocks * w.threads, std::max<int64_t>(1, w.elements))));
    double warps_share = std::min(
        1.0, threads / 32 / (std::max(1, r.multiprocessors) * loop_full_rate_warps_per_sm));
    return pick(memory(share), "memory",
                arithmetic(transcendental_cost, loop_arithmetic_cost) / warps_share, "arithmetic");
  }
  case KernelKind::row:
    if (w.strategy == GpuStrategy::block_per_output)
      return pick(static_cast<double>(w.bytes + w.reread_bytes) /
                      (r.bytes_per_second * block_row_memory_share),
                  "memory", arithmetic(row_transcendental_cost, 0), "arithmetic");
    return pick(memory(row_memory_share), "memory", arithmetic(row_transcendental_cost, 0),
                "arithmetic");
  case KernelKind::reduce: {
    if (w.strategy != GpuStrategy::column_split)
      return pick(memory(reduce_memory_share), "memory", 0, "");
    // Each block walks its columns down every row: few blocks, each far from the memory's
    // rate, unless there are enough of them to saturate it. Fitted on 1024-thread blocks with
    // a column and a row in flight a thread; more in flight, proportionally more.
    double resident_threads = static_cast<double>(std::min(w.blocks, wave_blocks) * w.threads);
    double blocks_rate = resident_threads / 1024 * column_block_share *
                         static_cast<double>(w.rows_in_flight * w.vector_width) *
                         r.bytes_per_second;
    double share = w.vector_width > 1 ? column_vector_memory_share : column_memory_share;
    return pick(static_cast<double>(w.bytes) / blocks_rate, "columns", memory(share), "memory");
  }
  case KernelKind::scatter_add:
    if (w.strategy == GpuStrategy::serial_scatter) // one thread: about a byte per nanosecond
      return pick(static_cast<double>(w.bytes) * 1e-9, "one thread", 0, "");
    if (w.strategy == GpuStrategy::owned_scatter) {
      double waves = std::ceil(static_cast<double>(w.blocks) / static_cast<double>(wave_blocks));
      return pick(memory(scatter_memory_share), "memory",
                  waves * static_cast<double>(w.scan_tiles) * owned_scatter_tile_seconds,
                  "index scan");
    }
    return pick(memory(scatter_memory_share), "memory", 0, "");
  case KernelKind::collective: return {0, "collective"};
  }
  return {r.launch_seconds, "launch"};
}

std::vector<KernelWork> predict_plan(const FusionPlan& plan,
                                     std::span<const GpuLaunchStep> launches,
                                     std::vector<profile::KernelInfo>& infos,
                                     const GpuRates& rates) {
  std::vector<KernelWork> work = plan_work(plan, launches, infos);
  for (profile::KernelInfo& info : infos)
    info.predicted_seconds = 0;
  for (std::size_t i = 0; i < launches.size(); ++i)
    infos[launches[i].kernel].predicted_seconds += predict_kernel(work[i], rates).seconds;
  return work;
}

std::string print_predictions(std::span<const KernelWork> work, const GpuRates& rates) {
  std::string out = "cost model (" + rates.name + ": " + std::to_string(rates.multiprocessors) +
                    " SMs, " + std::to_string(rates.bytes_per_second / 1e9).substr(0, 6) +
                    " GB/s, " + std::to_string(rates.tensor_flops / 1e12).substr(0, 6) +
                    " TFLOP/s tensor, " + std::to_string(rates.fp32_flops / 1e12).substr(0, 5) +
                    " TFLOP/s f32):\n";
  double total = 0;
  std::map<std::string, std::pair<double, int>> by_kind;
  char line[512];
  for (const KernelWork& w : work) {
    KernelPrediction p = predict_kernel(w, rates);
    total += p.seconds;
    auto& [seconds, count] = by_kind[kernel_kind_name(w.kind)];
    seconds += p.seconds;
    ++count;
    std::snprintf(line, sizeof line, "  %10.1f us  %-12s %s  [", p.seconds * 1e6, p.bound,
                  w.name.c_str());
    out += line + describe(w) + "]\n";
  }
  out += "  by kind:";
  for (const auto& [kind, entry] : by_kind) {
    std::snprintf(line, sizeof line, " %s %.3f ms (%d)", kind.c_str(), entry.first * 1e3,
                  entry.second);
    out += line;
  }
  std::snprintf(line, sizeof line, "\npredicted_step_ms=%.3f device=", total * 1e3);
  return out + line + rates.name + "\n";
}

} // namespace sinter
