// jit/train/shape_buckets.hpp — shape buckets: pad dim 1 of named batch inputs to the next declared
// size, so variable lengths compile one program per bucket
#pragma once
#include "jit/runtime/host_tensor.hpp"

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace sinter {

/// Batch input name → the sizes its dim 1 (the sequence dim, after the batch) is padded to: a
/// call whose input has length L runs the program for the smallest size ≥ L. Every bucketed
/// input of a call must have the same length (a language model's tokens and targets).
using ShapeBuckets = std::map<std::string, std::vector<int64_t>>;

/// The dim that buckets pad.
inline constexpr int64_t bucketed_dim = 1;
/// The batch input a bucketed step gets after the user's: i32 [batch], each row's real length.
inline constexpr const char* bucket_lengths_name = "bucket.length";

/// Throws std::invalid_argument naming the problem: an input that is not among `batch_names`,
/// no sizes, a size < 1, or a name given twice in one list.
void check_shape_buckets(const ShapeBuckets& buckets, std::span<const std::string> batch_names);

/// The batch a bucketed program runs on.
struct BucketedBatch {
  /// The user's inputs, the bucketed ones zero-padded along dim 1, then the lengths
  /// (bucket_lengths_name).
  std::vector<HostTensor> tensors;
  int64_t length = 0; ///< the real length of the bucketed inputs' dim 1
  int64_t padded = 0; ///< the bucket it was padded to
};

/// Pads `batch` (named by `batch_names`) to its bucket. Throws std::invalid_argument when a
/// bucketed input has rank < 2, when two bucketed inputs differ in length or rows, or when the
/// length exceeds the largest bucket (naming the input and how to fix it).
BucketedBatch pad_to_bucket(const ShapeBuckets& buckets, std::span<const std::string> batch_names,
                            std::span<const HostTensor> batch);

/// The bucketed batch at up to `count` other buckets: the nearest smaller sizes, then the
/// nearest larger (none with one bucket). Only their types matter: a compile plans the step at
/// them too, so that the kernels it makes serve every bucket (TrainStep::remember_other_shape).
/// Two, because at one bucket a length may equal another dim (the batch, a head's width) and
/// some kernels then fuse or simplify differently; the other still shows which sizes vary.
std::vector<std::vector<HostTensor>>
batches_at_other_buckets(const ShapeBuckets& buckets, std::span<const std::string> batch_names,
                         const BucketedBatch& batch, std::size_t count = 2);

/// `shape bucket 16 of 8, 16, 32, 64`: the bucket a batch was padded to, for compile lines.
std::string describe_bucket(const ShapeBuckets& buckets, const BucketedBatch& batch);

/// A copy of x with dim `dim` cut or zero-padded to `extent` entries (the first ones kept).
HostTensor resize_dim(const HostTensor& x, int64_t dim, int64_t extent);

} // namespace sinter
