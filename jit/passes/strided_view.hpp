// jit/passes/strided_view.hpp — a value that reshapes, permutes and slices of a buffer only
// rearrange, as that buffer's elements at an offset and a stride per dim
#pragma once
#include "jit/ir/graph.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace sinter {

/// Element `index` of the value lies at element offset + Σ index[n] · strides[n] of `buffer`.
struct StridedView {
  ValueId buffer = 0;
  int64_t offset = 0;
  std::vector<int64_t> strides; ///< one per dim of the value
};

/// Whether `op` only rearranges elements in a way strides can express (reshape, permute, slice).
bool is_view_op(OpId op);

/// Row-major strides of `shape`.
std::vector<int64_t> contiguous_strides(const Shape& shape);

/// `value` as a strided view of the first value `is_buffer` accepts on the way up its chain of
/// reshape, permute and slice nodes; nullopt when another op comes first, or when a reshape
/// merges dims the view's strides keep apart (which only a copy can lay out).
std::optional<StridedView> strided_view(const Graph& graph, ValueId value,
                                        const std::function<bool(ValueId)>& is_buffer);

} // namespace sinter
