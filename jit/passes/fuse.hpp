// jit/passes/fuse.hpp — groups primitives into kernels: fused loop nests, reductions, GEMMs
#pragma once
#include "jit/ir/graph.hpp"
#include "jit/passes/strided_view.hpp"
#include "ops/kernel_kind.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sinter {

/// Whether `op` is one of the collective primitives (KernelKind::collective roots).
bool is_collective(OpId op);

/// Whether `op` is one of the fused attention primitives (KernelKind::attention roots).
bool is_fused_attention(OpId op);
/// Whether any node of `graph` is one of them.
bool has_fused_attention(const Graph& graph);

/// Whether node `value` reduces its operand's last axis alone (what row kernels take in).
bool is_row_reduction(const Graph& graph, ValueId value);

/// Whether operand `position` of fused attention node `node` (q, k, v, and the backward's o and
/// dO) may be read through a strided view (FusionOptions::attention_operand_views).
bool attention_operand_may_be_strided(const Node& node, std::size_t position);
/// Fused attention's operand `value` as the strided view its kernel reads, when it is one that
/// the kernels take: the view of the first value up its chain of reshapes, permutes and slices
/// that `is_buffer` accepts, its last dim contiguous, and its offset and every other stride whole
/// 16-byte pieces. nullopt otherwise (a copy laid out [..., T, D] is read instead).
std::optional<StridedView> attention_operand_view(const Graph& graph, ValueId value,
                                                  const std::function<bool(ValueId)>& is_buffer);

/// How a GEMM operand is read: `logical` (a matrix or batch of matrices, row-major in the memory
/// of `buffer`), used as is or transposed in its last two dims.
struct GemmOperand {
  ValueId buffer = 0;
  ValueId logical = 0;
  bool transposed = false;
};

struct Kernel {
  KernelKind kind = KernelKind::loop;
  ValueId root = 0;
  /// Loop kernels: further values of the root's shape the same pass writes at each element
  /// (siblings that read the same buffers, a cast of the root, AdamW's m, v and parameter).
  std::vector<ValueId> extra_outputs;
  /// Nodes computed inside the kernel (root included), in graph order.
  std::vector<ValueId> body;
  /// Materialised values (buffers) the kernel reads, in first-use order.
  std::vector<ValueId> reads;
  GemmOperand gemm_a{}, gemm_b{}; ///< gemm kernels only
  /// In-place update: a read buffer this kernel may write its result over (same size, read only
  /// at the element being written, last read here). Equal to `root` when there is none.
  ValueId overwrites = 0;
  bool in_place() const { return overwrites != root; }
  /// Outputs stored over the buffer of a graph input they replace (Donation; loop kernels, with
  /// FusionOptions::store_over_donated_inputs), as (output, input): the kernel reads that input
  /// only at the element being written, or not at all, and no later kernel reads it.
  std::vector<std::pair<ValueId, ValueId>> over_inputs;
  /// Every buffer the kernel writes: the root, then extra_outputs.
  std::vector<ValueId> outputs() const {
    std::vector<ValueId> out{root};
    out.insert(out.end(), extra_outputs.begin(), extra_outputs.end());
    return out;
  }
  bool writes(ValueId v) const {
    return v == root ||
           std::find(extra_outputs.begin(), extra_outputs.end(), v) != extra_outputs.end();
  }
};

/// The result of fusion: which values live in memory and the kernels that compute them.
struct FusionPlan {
  const Graph* graph = nullptr;
  std::vector<Kernel> kernels; ///< in a valid execution order
  /// materialized[id]: node `id` has its own buffer (inputs and kernel roots).
  std::vector<bool> materialized;
  /// view_of[id] != id: node `id` is a reshape of a buffer and shares its memory.
  std::vector<ValueId> view_of;

  /// Whether `kernel` loads `v` from memory (a buffer or a view of one it does not write) rather
  /// than computing it.
  bool loads(const Kernel& kernel, ValueId v) const {
    return !kernel.writes(v) && !kernel.writes(view_of[v]) && (materialized[v] || view_of[v] != v);
  }

  std::string print() const;
};

/// By value: the graph input whose buffer it is stored over (Kernel::over_inputs), or the value
/// itself where it has a buffer of its own.
inline std::vector<ValueId> storage_over_inputs(const FusionPlan& plan) {
  std::vector<ValueId> over(plan.graph->size());
  for (ValueId v = 0; v < over.size(); ++v)
    over[v] = v;
  for (const Kernel& kernel : plan.kernels)
    for (auto [out, in] : kernel.over_inputs)
      over[out] = in;
  return over;
}

struct FusionOptions {
  /// Fuse last-axis reductions with the elementwise work before and after them into row
  /// kernels (KernelKind::row). Backends whose schedule emits row kernels ask for it.
  bool row_kernels = false;
  /// Merge reductions over the same axes of same-shaped operands into one kernel with several
  /// outputs (KernelKind::reduce with extra_outputs). Backends whose schedule folds several
  /// reductions in one pass ask for it.
  bool sibling_reductions = false;
  /// Recompute cheap elementwise values (up to a dozen instructions per element, read by at
  /// most four kernels) from buffers that outlive them anyway instead of storing them: less
  /// memory across the backward pass (GELU keeps its input alone) for a little arithmetic.
  bool rematerialize = false;
  /// With row_kernels: column sums already split into groups of rows (a reduce_sum over axis 1
  /// of [groups, rows per group, length], ColumnSplitOptions::row_groups) join the row kernel
  /// over the same rows as per-group partial outputs, when there are `row_partial_min_groups`
  /// to `row_partial_max_groups` groups (one block each) and the kernel's partials hold at most
  /// `row_partial_max_values` values per row (partials × length): a layernorm backward's γ and
  /// β gradients are then summed as the pass computes the input's gradient, not by a second
  /// pass over the same rows. Fewer groups join too when each holds `row_partial_group_rows`
  /// rows: the split's groups where the rows are too few for more (ColumnSplitOptions::
  /// row_group_min_rows), so that the kernel is the same at every row count. 0: never.
  int64_t row_partial_max_values = 0;
  int64_t row_partial_min_groups = 0;
  int64_t row_partial_max_groups = 0;
  int64_t row_partial_group_rows = 0;
  /// Fused attention reads q, k, v, o and dO through the reshapes, permutes and slices that lay
  /// them out [..., T, D] (attention_operand_view: the heads of a packed qkv GEMM output, say)
  /// rather than a copy made by a loop kernel; the value under them is stored, so a bias added
  /// there can become the GEMM's epilogue. Backends whose attention kernels take strided
  /// operands ask for it.
  bool attention_operand_views = false;
  /// Loop passes over more elements than this merge only where they share a read of more than
  /// one element or one reads what the other writes: unrelated updates that share only a scalar
  /// (AdamW's of different parameters share the learning rate) keep a kernel each, as each
  /// already fills the device, and a pass writing dozens of buffers streams them worse (on the
  /// H100: 1.7–1.9 TB/s merged, 2.8 TB/s for one parameter's update). 0: no limit.
  int64_t scalar_sibling_max_elements = 0;
  /// Loop kernels store an output that replaces a graph input (Graph::donations: a step's new
  /// parameters and optimizer state) over that input's buffer where it is safe
  /// (Kernel::over_inputs). Backends that keep such inputs on a device between runs ask for it:
  /// no buffer of the output's own, and no copy back into the input after the run.
  bool store_over_donated_inputs = false;
  /// A bias added to a GEMM's result (C + broadcast of a vector, reshapes and casts between)
  /// whose rows are longer than this and reduced along (a loss's log-sum-exp) is stored, so that
  /// it can become the GEMM's epilogue (find_gemm_epilogues) rather than be inlined into a row
  /// kernel that reads the whole vector again for every row and pass (a language model's head:
  /// GPT-2's 201 KB bias, three passes over each of 8192 rows of logits). 0: never.
  int64_t gemm_bias_rows_above = 0;
  /// A bias added to a GEMM's result (as for gemm_bias_rows_above) that feeds a tanh (GELU's
  /// tanh form) and that more than one kernel reads (GELU's forward and, in training, its
  /// backward) is stored in place of the GEMM's result: the GEMM then writes it as the
  /// pre-activation cuBLASLt's GELU_AUX_BIAS epilogue stores beside GELU's output, and DGELU
  /// reads it back in the backward (find_gemm_epilogues), where the loops read C and the bias.
  bool gemm_gelu_pre_activation = false;
};

/// Decides what to materialise: graph outputs, reductions, GEMMs and their operands, scatters,
/// and arithmetic values used by more than one kernel; everything else is inlined into its
/// consumers (index-only ops such as broadcast, permute and slice are never materialised).
/// Then merges loop kernels over the same shape into one pass with several outputs where one
/// reads what the other reads or writes, at the element being written (and, with
/// `options.sibling_reductions`, reductions over the same axes that share a read).
/// With `options.row_kernels`, a loop kernel then takes in the reductions over its rows and the
/// kernels that feed them (see KernelKind::row).
FusionPlan fuse(const Graph& graph, FusionOptions options = {});
/// The plan points into `graph`: a temporary would leave it dangling.
FusionPlan fuse(Graph&& graph, FusionOptions options = {}) = delete;

/// With `options.rematerialize`: a stored value that is cheap to recompute (GELU's output, a
/// layer norm's output) and that a GEMM reads long after its other readers (the weight
/// gradient, in the backward pass) is computed a second time right before that GEMM, from
/// buffers alive then anyway (or fewer bytes kept longer), so the first copy dies with its
/// forward readers. Returns a graph with those copies (nodes CSE would merge back: run no CSE
/// after it), or `graph` itself when nothing qualifies — or when `fits` says the plan that keeps
/// them (the graph's own fusion) fits in memory: recomputing trades bandwidth for memory.
Graph recompute_late_gemm_operands(const Graph& graph, FusionOptions options,
                                   const std::function<bool(const FusionPlan&)>& fits = {});

/// Where each kernel's work must be complete: for a collective kernel, the index of the first
/// later kernel that reads what it writes (kernels.size() when only the graph's outputs do); for
/// any other kernel, its own index. A collective runs from its kernel to that point while the
/// kernels in between compute, so the buffers it reads stay alive until then.
std::vector<std::size_t> collective_waits(const FusionPlan& plan);
/// Each buffer's last use, by kernel index: its last reader, or for a collective's operand the
/// collective's wait point when that is later.
std::vector<std::size_t> buffer_last_use(const FusionPlan& plan);

/// Row kernels: the reductions computed once per row, in the order they run.
std::vector<ValueId> row_reductions(const Graph& graph, const Kernel& kernel);

/// A row kernel's rows, and which of its outputs (positions in kernel.outputs()) are whole
/// rows, which hold one value per row, and which are column sums per group of `group`
/// consecutive rows (FusionOptions::row_partial_max_values: output [rows / group, length]).
struct RowLayout {
  std::vector<ValueId> reductions; ///< row_reductions()
  /// The reductions (positions in `reductions`) each pass over the row folds together: a pass
  /// holds those whose operands read only earlier passes' values, so a row is read once per
  /// pass (GPT-2's loss: the max and the picked logit, then the sum of exponentials).
  std::vector<std::vector<std::size_t>> passes;
  int64_t rows = 0, length = 0; ///< rows of `length` elements along the last axis
  std::vector<std::size_t> full, per_row, partials;
  int64_t group = 0; ///< rows per group of the partials (0: none)
};
RowLayout row_layout(const Graph& graph, const Kernel& kernel);

/// Whether a reduce kernel reduces its operand's last axis (each output folds a contiguous
/// run), as opposed to keeping it (outputs are whole rows, accumulated across rows). Every
/// schedule and launch decision that depends on the reduction's layout asks this.
bool reduces_last_axis(const Graph& graph, const Kernel& kernel);

} // namespace sinter
