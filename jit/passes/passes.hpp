// jit/passes/passes.hpp — the graph → graph passes the pipeline is made of
#pragma once
#include "jit/ir/graph.hpp"
#include "ops/value.hpp"

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sinter {

/// Rebuilds the live part of `graph` (nodes reachable from its outputs, plus all inputs) into a
/// fresh graph, node by node in order. `replace` sees each node with its operands already
/// rebuilt and returns a replacement, or a null Value to copy the node as it is. Nodes keep
/// their model-path scope; hash-consing in the new graph merges duplicates. A replacement must
/// keep the node's type unless `may_retype` (autocast): then outputs keep what they map to.
using NodeRewrite = std::function<Value(const Node& node, std::span<const Value> operands)>;
Graph rebuild(const Graph& graph, const NodeRewrite& replace, bool may_retype = false);
/// Interns every model-path scope of `from` in `into`: entry s is the scope in `into` that
/// `from`'s scope s became (what a pass copying nodes between graphs gives set_current_scope).
std::vector<uint32_t> copy_scopes(const Graph& from, Graph& into);

struct AutodiffOptions {
  /// Names of the inputs to differentiate with respect to (empty = every float input).
  std::vector<std::string> wrt;
  /// Index of the output to differentiate; non-scalar outputs are seeded with ones.
  std::size_t output = 0;
};

/// Reverse-mode autodiff: appends the gradient graph and one output `grad:<input>` per wrt
/// input. Throws std::invalid_argument for an unknown or integer wrt input.
Graph autodiff(const Graph& graph, const AutodiffOptions& options);
/// `grad:<input>`: the name of autodiff's output for `input`.
std::string gradient_output_name(std::string_view input);
/// The input whose gradient output `output` is, if it is one.
std::optional<std::string> gradient_input_name(std::string_view output);

/// Mixed precision (docs/amp.md), run on the traced graph before autodiff: every op computes
/// in the precision its `precision` rule (or the user's amp::region) asks for, with casts
/// inserted on f32 operands; `low` is bf16 or f16. f32 inputs (master weights) stay f32, each
/// output keeps its type, and f64 or integer values are never touched.
Graph autocast(const Graph& graph, DType low);

/// Expands composite ops into primitives and drops stop_gradient (run after autodiff).
Graph lower(const Graph& graph);
/// Expands only the composites `selected` accepts (repeatedly, as lowerings may add more);
/// stop_gradient stays.
Graph lower_selected(const Graph& graph, const std::function<bool(OpId)>& selected);
/// Expands the selected primitives into their decompositions (OpDef::lower: fused attention
/// as GEMMs and a softmax), then any composites those use; simplify and cse after. For a
/// backend without a native kernel for some primitive.
Graph decompose(const Graph& graph, const std::function<bool(OpId)>& selected);
/// Picks nodes by what they are and what they take (the node, its operands in the new graph).
using NodeSelector = std::function<bool(const Node&, std::span<const Value>)>;
/// decompose() for the nodes `selected` accepts, whatever their op (a backend whose kernel
/// takes some shapes or types of an op and not others).
Graph decompose_nodes(const Graph& graph, const NodeSelector& selected);
/// When split_column_reductions splits a reduction of leading axes (a column reduction: bias
/// and layernorm γ/β gradients) whose GPU kernel would have too few blocks: one block takes 32
/// columns and walks every row, so 768 columns make 24 blocks on an H100's 132 SMs.
struct ColumnSplitOptions {
  int64_t columns_per_block = 32;
  /// Bytes of neighbouring columns a lane of the block loads at once (0: one column): a block
  /// then covers columns_per_block times the columns that many bytes of the operand (before
  /// any widening cast) hold, where they divide the column count.
  int64_t lane_bytes = 0;
  int64_t target_blocks = 256;     ///< about two 1024-thread blocks per SM of an H100
  int64_t min_rows = 4096;         ///< fewer rows: one pass (and a GEMM may absorb it)
  int64_t min_rows_per_split = 64; ///< each of a block's 32 row groups walks 2 rows at least
  int64_t min_bytes = 256ll << 10; ///< a smaller operand is quick in one pass
  /// Whether a GEMM of `product` type can write the column sums of its B operand, in `sum`
  /// type, as it multiplies (cuBLASLt's BGRADA): a reduce_sum of leading axes whose operand (or
  /// that operand widened from bf16/f16 to f32) is, up to reshapes, a later 2-D matmul's B then
  /// stays whole, for the GEMM to absorb. Unset: every long reduction splits.
  std::function<bool(DType product, DType sum)> gemm_sums_columns;
  /// Groups of rows for the column sums a row kernel can take in (FusionOptions::
  /// row_partial_max_values; 0: none): a reduce_sum of leading axes over rows at most
  /// `row_group_max_length` long whose operand starts from a value that a reduction over the
  /// last axis of the same rows also reads (a layernorm backward's γ and β gradients and its
  /// row sums, all from dy) splits, whatever its size, into the largest number of groups of
  /// consecutive rows up to `row_groups` that divides the rows, one block of that row kernel
  /// each, when that is at least `row_groups_min` groups of `row_group_min_rows` rows or more;
  /// fewer rows than `row_groups_min` such groups hold split into groups of exactly
  /// `row_group_min_rows` rows where that divides them (the same kernel at every such count).
  int64_t row_groups = 0;
  int64_t row_groups_min = 0;
  int64_t row_group_min_rows = 0;
  int64_t row_group_max_length = 0;
};
/// The number of row groups a column reduction of `rows` rows of `columns` columns (its operand
/// `bytes` long, `element_bytes` an element before widening) is split into: a power of two
/// dividing `rows` that brings its blocks to `target_blocks`, or 1.
int64_t column_reduction_splits(int64_t rows, int64_t columns, int64_t bytes,
                                const ColumnSplitOptions& options = {}, int64_t element_bytes = 4);
/// Each long reduction of leading axes (reduce_sum, _max, _min) over x[rows, rest...] becomes
/// the same reduction over axis 1 of x as [splits, rows / splits, rest...], then over axis 0
/// (16-bit results keep their partials in f32), except bias gradients a GEMM may take
/// (`gemm_sums_columns`); sums beside a row kernel split into its blocks' groups (`row_groups`).
/// CUDA runs it before fusion.
Graph split_column_reductions(const Graph& graph, const ColumnSplitOptions& options = {});
/// Fused attention's operands that are a cast of reshapes, permutes and slices of a value (q,
/// k and v under autocast, split from a packed f32 projection) become those views of the cast
/// value: one cast of the whole projection, which a strided attention operand can read
/// (FusionOptions::attention_operand_views) and a GEMM epilogue can write. CUDA runs it before
/// fusion.
Graph cast_before_attention_views(const Graph& graph);
/// Fused attention writing its results where their readers want them: a forward whose heads
/// are merged ([..., H, T, D] swapped to [..., T, H, D], then reshaped for the output
/// projection) writes token-major (attention_attrs::token_major), and the gradients of q, k and
/// v that are summed into the gradient of the packed projection they were split from become one
/// packed gradient node writing that sum in place (attention_attrs::grad_packed). CUDA runs it
/// before fusion; the copies that laid the heads out are gone.
Graph attention_results_in_place(const Graph& graph);
/// The inverse, for kernels that write one head-major result per node (the CPU's): token-major
/// forwards and packed gradients as head-major nodes and the views and concat that lay them out.
Graph head_major_attention(const Graph& graph);
/// Algebraic simplification and constant folding (x*1, x+0, -(-x), permute∘permute, ...).
Graph simplify(const Graph& graph);
/// Common-subexpression and dead-code elimination.
Graph cse(const Graph& graph);

/// Copies every node of `from` into `into` (hash-consing merges what `into` already computes)
/// and returns its outputs there. `input` gives the value each input of `from` stands for.
std::vector<Value> inline_graph(Graph& into, const Graph& from,
                                const std::function<Value(const NamedValue& input)>& input);

/// In-step sifting: `graph` computes a whole batch and again some of its rows, whose batch
/// inputs are gather(input, rows) with `rows` an integer [k] value. Each value of that second
/// computation that provably equals the same rows of a value of the first (matched op by op,
/// OpDef::row_wise) becomes a gather of it, and what only fed those values is dropped: the
/// rows' forward pass is read from the batch's instead of computed again. Run after lower().
Graph share_taken_rows(const Graph& graph, ValueId rows);

} // namespace sinter
