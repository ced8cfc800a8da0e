// ops/padding.cpp — shape buckets while tracing: the thread's padding and the masks built from it
#include "ops/padding.hpp"

#include <numeric>

namespace sinter {
namespace {

thread_local const SequencePadding* current_padding = nullptr;

// [batch, extent] bool: true where the position is below the row's length.
Value real_positions(const SequencePadding& p) {
  Graph& g = *p.lengths.graph;
  int64_t rows = p.lengths.shape().at(0);
  Value positions = iota(g, DType::i32, {1, p.extent}, 1);
  return less(positions, reshape(p.lengths, {rows, 1}));
}

bool is_padded(const SequencePadding* p, Value x) {
  if (p == nullptr || !x || x.graph != p->lengths.graph) return false;
  Shape s = x.shape();
  return static_cast<int64_t>(s.size()) > p->dim && s[0] == p->lengths.shape().at(0) &&
         s[static_cast<std::size_t>(p->dim)] == p->extent;
}

} // namespace

const SequencePadding* sequence_padding() { return current_padding; }

SequencePaddingScope::SequencePaddingScope(SequencePadding padding)
    : padding_(std::move(padding)), previous_(current_padding) {
  current_padding = &padding_;
}

SequencePaddingScope::~SequencePaddingScope() { current_padding = previous_; }

Value padding_mask(Value x) {
  const SequencePadding* p = current_padding;
  if (!is_padded(p, x)) return {};
  // The positions sit on dims 0 and `dim`; every dim between them and after them is 1.
  Shape shape(static_cast<std::size_t>(x.rank()), 1);
  shape[0] = x.shape()[0];
  shape[static_cast<std::size_t>(p->dim)] = p->extent;
  return reshape(real_positions(*p), shape);
}

Value padded_mean(Value x, std::vector<int64_t> axes) {
  Value mask = padding_mask(x);
  if (!mask) return mean(x, axes);
  Value real = broadcast_to(mask, x.shape());
  Value total = sum(where(real, x, 0.0), axes);
  Value counted = sum(where(real, 1.0, zeros_like(x)), axes);
  // A slice with no real position (a row of length 0) is 0, not 0/0.
  return total / maximum(counted, scalar_like(counted, 1.0));
}

Value padded_key_mask(Value q, Value k, bool causal) {
  const SequencePadding* p = current_padding;
  if (p == nullptr || !k || k.graph != p->lengths.graph || k.rank() < 2) return {};
  Shape ks = k.shape();
  int64_t rows = p->lengths.shape().at(0), keys = ks[ks.size() - 2];
  if (ks[0] != rows || keys != p->extent) return {};
  // Causal and square, top-left aligned: query i < length sees keys j <= i only.
  if (causal && q.shape()[q.shape().size() - 2] == keys) return {};
  Shape shape(ks.size(), 1);
  shape[0] = rows;
  shape.back() = keys;
  return reshape(real_positions(*p), shape);
}

} // namespace sinter
