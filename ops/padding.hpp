// ops/padding.hpp — shape buckets while tracing: which dim is padded, each row's real length, and
// the masks that keep padding out of losses, reductions and attention
#pragma once
#include "ops/value.hpp"

#include <vector>

namespace sinter {

/// While a step with shape buckets (StepOptions::buckets, docs/profiling.md) is traced: dim
/// `dim` of the bucketed batch inputs is padded to `extent`, and `lengths` (i32 [batch]) holds
/// each row's real length along it.
struct SequencePadding {
  int64_t dim = 1;
  int64_t extent = 0;
  Value lengths;
};

/// The padding of the trace running on this thread, or nullptr.
const SequencePadding* sequence_padding();

/// Makes `padding` current on this thread until destroyed (restoring the previous one).
class SequencePaddingScope {
public:
  explicit SequencePaddingScope(SequencePadding padding);
  ~SequencePaddingScope();
  SequencePaddingScope(const SequencePaddingScope&) = delete;
  SequencePaddingScope& operator=(const SequencePaddingScope&) = delete;

private:
  SequencePadding padding_;
  const SequencePadding* previous_;
};

/// A bool mask broadcastable to x ([batch, extent, 1, ...], x's rank), true at x's real
/// positions, when x is padded: a trace with buckets is running, x belongs to it, dim 0 is the
/// batch and dim `dim` has the padded extent. Otherwise a null Value.
Value padding_mask(Value x);

/// The mean of x over `axes` (empty: all) counting only real positions when x is padded (see
/// padding_mask); plain mean otherwise. A result element with no real position is 0.
Value padded_mean(Value x, std::vector<int64_t> axes = {});

/// The key mask attention needs when its keys k ([batch, ..., Tk, D]) are padded: bool
/// [batch, 1, ..., 1, Tk] with k's rank, true at real keys. Null when k is not padded, or when
/// the attention is causal and square (its real queries never reach a padded key).
Value padded_key_mask(Value q, Value k, bool causal);

} // namespace sinter
