// jit/train/shape_buckets.cpp — shape buckets: checking the declaration, choosing a bucket, padding
// and cropping host tensors
#include "jit/train/shape_buckets.hpp"
#include "jit/ir/graph.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace sinter {
namespace {

std::string size_list(const std::vector<int64_t>& sizes) {
  std::string out;
  for (int64_t s : sizes)
    out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out;
}

std::vector<int64_t> sorted_sizes(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> sorted = sizes;
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

} // namespace

void check_shape_buckets(const ShapeBuckets& buckets, std::span<const std::string> batch_names) {
  for (const auto& [name, sizes] : buckets) {
    if (std::find(batch_names.begin(), batch_names.end(), name) == batch_names.end()) {
      std::string known;
      for (const std::string& n : batch_names)
        known += (known.empty() ? "" : ", ") + n;
      throw std::invalid_argument("sinter: buckets name the batch input '" + name +
                                  "', but the step's batch inputs are " + known +
                                  " — name one of them (set StepOptions::batch_names)");
    }
    if (sizes.empty())
      throw std::invalid_argument("sinter: buckets for '" + name +
                                  "' list no sizes — give at least one, e.g. {64, 128}");
    std::vector<int64_t> sorted = sorted_sizes(sizes);
    if (sorted.front() < 1)
      throw std::invalid_argument("sinter: buckets for '" + name + "' include the size " +
                                  std::to_string(sorted.front()) + " — sizes must be >= 1");
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
      throw std::invalid_argument("sinter: buckets for '" + name + "' list a size twice (" +
                                  size_list(sizes) + ")");
  }
}

std::string describe_bucket(const ShapeBuckets& buckets, const BucketedBatch& batch) {
  // Every bucketed input of a call pads to the same size: any entry names the list.
  for (const auto& [name, sizes] : buckets)
    if (std::find(sizes.begin(), sizes.end(), batch.padded) != sizes.end())
      return "shape bucket " + std::to_string(batch.padded) + " of " +
             size_list(sorted_sizes(sizes));
  return "shape bucket " + std::to_string(batch.padded);
}

std::vector<std::vector<HostTensor>>
batches_at_other_buckets(const ShapeBuckets& buckets, std::span<const std::string> batch_names,
                         const BucketedBatch& batch, std::size_t count) {
  std::vector<int64_t> others;
  for (std::size_t i = 0; i < batch_names.size() && others.empty(); ++i) {
    auto bucket = buckets.find(batch_names[i]);
    if (bucket == buckets.end()) continue;
    // The nearest smaller sizes first, then the nearest larger.
    std::vector<int64_t> sizes = sorted_sizes(bucket->second);
    auto at = std::lower_bound(sizes.begin(), sizes.end(), batch.padded);
    for (auto below = at; below != sizes.begin() && others.size() < count;)
      others.push_back(*--below);
    for (auto above = at == sizes.end() ? at : at + 1;
         above != sizes.end() && others.size() < count; ++above)
      others.push_back(*above);
  }
  std::vector<std::vector<HostTensor>> out;
  for (int64_t other : others) {
    std::vector<HostTensor> resized = batch.tensors;
    for (std::size_t i = 0; i < batch_names.size(); ++i)
      if (buckets.contains(batch_names[i]))
        resized[i] = resize_dim(resized[i], bucketed_dim, other);
    out.push_back(std::move(resized));
  }
  return out;
}

HostTensor resize_dim(const HostTensor& x, int64_t dim, int64_t extent) {
  const Shape& shape = x.shape();
  if (dim < 0 || dim >= static_cast<int64_t>(shape.size()))
    throw std::invalid_argument("sinter: resize_dim: dim " + std::to_string(dim) +
                                " of a tensor of rank " + std::to_string(shape.size()));
  if (extent < 0) throw std::invalid_argument("sinter: resize_dim: negative extent");
  Shape out_shape = shape;
  out_shape[static_cast<std::size_t>(dim)] = extent;
  HostTensor out(x.dtype(), out_shape); // zero-filled
  // Rows of the leading dims, each a block of `inner` elements per index of `dim`.
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[static_cast<std::size_t>(d)];
  for (std::size_t d = static_cast<std::size_t>(dim) + 1; d < shape.size(); ++d)
    inner *= shape[d];
  const int64_t old_extent = shape[static_cast<std::size_t>(dim)];
  const auto element = static_cast<int64_t>(dtype_bytes(x.dtype()));
  const int64_t kept = std::min(old_extent, extent) * inner * element;
  std::span<const std::byte> from = x.bytes();
  std::span<std::byte> to = out.bytes();
  for (int64_t o = 0; o < outer && kept > 0; ++o)
    std::memcpy(to.data() + o * extent * inner * element,
                from.data() + o * old_extent * inner * element, static_cast<std::size_t>(kept));
  return out;
}

BucketedBatch pad_to_bucket(const ShapeBuckets& buckets, std::span<const std::string> batch_names,
                            std::span<const HostTensor> batch) {
  if (batch.size() != batch_names.size())
    throw std::invalid_argument("sinter: " + std::to_string(batch.size()) + " batch inputs for " +
                                std::to_string(batch_names.size()) + " names");
  BucketedBatch out;
  out.tensors.assign(batch.begin(), batch.end());
  const std::string* first = nullptr; // the bucketed input that fixed the length
  int64_t rows = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto bucket = buckets.find(batch_names[i]);
    if (bucket == buckets.end()) continue;
    const HostTensor& x = batch[i];
    const std::string& name = batch_names[i];
    if (x.shape().size() < 2)
      throw std::invalid_argument("sinter: buckets pad dim 1 of '" + name + "', but it is " +
                                  to_string(TensorType{x.dtype(), x.shape()}) +
                                  " — bucketed inputs are [batch, length, ...]");
    int64_t length = x.shape()[1];
    if (first == nullptr) {
      first = &name;
      out.length = length;
      rows = x.shape()[0];
    } else if (length != out.length || x.shape()[0] != rows) {
      throw std::invalid_argument("sinter: bucketed inputs share one length per call, but '" +
                                  *first + "' is [" + std::to_string(rows) + ", " +
                                  std::to_string(out.length) + ", ...] and '" + name + "' [" +
                                  std::to_string(x.shape()[0]) + ", " + std::to_string(length) +
                                  ", ...] — crop them to the same length");
    }
    std::vector<int64_t> sizes = sorted_sizes(bucket->second);
    auto fits = std::lower_bound(sizes.begin(), sizes.end(), length);
    if (fits == sizes.end())
      throw std::invalid_argument("sinter: '" + name + "' has length " + std::to_string(length) +
                                  " (dim 1), more than its largest bucket " +
                                  std::to_string(sizes.back()) + " (buckets " + size_list(sizes) +
                                  ") — add a bucket of at least " + std::to_string(length) +
                                  " or crop the input");
    if (out.padded != 0 && *fits != out.padded)
      throw std::invalid_argument("sinter: bucketed inputs share one length per call, so their "
                                  "bucket sizes must agree: '" +
                                  *first + "' pads length " + std::to_string(length) + " to " +
                                  std::to_string(out.padded) + " but '" + name + "' to " +
                                  std::to_string(*fits) + " — give them the same sizes");
    out.padded = *fits;
    if (out.padded != length) out.tensors[i] = resize_dim(x, bucketed_dim, out.padded);
  }
  if (first == nullptr)
    throw std::invalid_argument("sinter: the step has buckets but none of its batch inputs "
                                "is bucketed");
  std::vector<double> lengths(static_cast<std::size_t>(rows), static_cast<double>(out.length));
  out.tensors.push_back(HostTensor::from_doubles(DType::i32, {rows}, lengths));
  return out;
}

} // namespace sinter
