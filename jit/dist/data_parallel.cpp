// jit/dist/data_parallel.cpp — gradient buckets, their collectives and ZeRO shards as graph ops
#include "jit/dist/data_parallel.hpp"

#include "jit/dist/communicator.hpp"

#include <cstdio>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace sinter {
namespace {

constexpr int64_t first_bucket_bytes = int64_t{1} << 20;

Value flat(Value v) { return reshape(v, {numel(v.shape())}); }

/// `parts` joined along `axis` (a bucket being packed); a single part as it is.
Value join(const std::vector<Value>& parts, int64_t axis) {
  return parts.size() == 1 ? parts[0] : concat(parts, axis);
}

/// The bucket's gradients summed over the ranks in one all_reduce of their flat concatenation,
/// each flat again ([elements]), by parameter index.
std::vector<std::pair<std::size_t, Value>>
summed_bucket(const std::vector<Value>& grads, const std::vector<std::size_t>& bucket, int ranks) {
  std::vector<Value> parts;
  for (std::size_t i : bucket)
    parts.push_back(flat(grads[i]));
  Value sum = all_reduce(join(parts, 0), ranks);
  std::vector<std::pair<std::size_t, Value>> out;
  int64_t offset = 0;
  for (std::size_t i : bucket) {
    int64_t n = numel(grads[i].shape());
    out.emplace_back(i, slice(sum, {offset}, {offset + n}));
    offset += n;
  }
  return out;
}

/// `v` flattened and padded to ranks × shard elements, as [ranks, shard].
Value shard_rows(Value v, int ranks) {
  int64_t n = numel(v.shape()), s = shard_elements(n, ranks);
  Value f = flat(v);
  if (s * ranks != n) f = pad(f, {0}, {s * ranks - n});
  return reshape(f, {ranks, s});
}

/// This rank's shard of `v` ([shard]): row `rank` of shard_rows.
Value own_shard(Value v, int ranks, Value rank) { return gather(shard_rows(v, ranks), rank); }

/// A whole tensor of `type` from its shards laid out as columns [begin, begin + s) of every
/// row of `gathered` ([ranks, S]).
Value from_columns(Value gathered, int64_t begin, const TensorType& type, int ranks) {
  int64_t n = numel(type.shape), s = shard_elements(n, ranks);
  Value columns = slice(gathered, {0, begin}, {ranks, begin + s});
  Value whole = reshape(columns, {ranks * s});
  if (ranks * s != n) whole = slice(whole, {0}, {n});
  return reshape(whole, type.shape);
}

} // namespace

int64_t shard_elements(int64_t elements, int ranks) {
  return std::max<int64_t>(1, (elements + ranks - 1) / ranks);
}

std::vector<std::vector<std::size_t>> gradient_buckets(const std::vector<Value>& grads,
                                                       const DataParallelLayout& layout) {
  std::vector<std::size_t> order(grads.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return grads[a].id < grads[b].id; });
  std::vector<std::vector<std::size_t>> buckets;
  int64_t filled = 0;
  for (std::size_t i : order) {
    int64_t bytes = static_cast<int64_t>(byte_size(grads[i].type()));
    // The bucket being filled: the first one is small, so its reduction starts early.
    int64_t cap = buckets.size() == 1 ? std::min(first_bucket_bytes, layout.bucket_bytes)
                                      : layout.bucket_bytes;
    if (buckets.empty() || (filled > 0 && filled + bytes > cap)) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += bytes;
  }
  return buckets;
}

UpdateResult append_data_parallel_update(Graph& g, const std::vector<std::string>& names,
                                         const std::vector<Value>& params,
                                         const std::vector<Value>& grads,
                                         const UpdateOptions& options,
                                         const DataParallelLayout& layout) {
  const int ranks = layout.ranks;
  if (ranks < 1) throw std::invalid_argument("sinter: a data-parallel step needs ranks >= 1");
  if (layout.zero < 0 || layout.zero > 2)
    throw std::invalid_argument("sinter: zero must be 0, 1 or 2, got " +
                                std::to_string(layout.zero));
  if (layout.bucket_bytes < 1)
    throw std::invalid_argument("sinter: the gradient bucket size must be positive");
  if (ranks == 1) return append_update(g, names, params, grads, options);
  for (const Value& grad : grads)
    if (grad.dtype() == DType::bf16 || grad.dtype() == DType::f16)
      throw std::invalid_argument("sinter: data parallel reduces f32 or f64 gradients, not " +
                                  std::string(dtype_name(grad.dtype())) +
                                  " (keep master weights in f32: AMP does)");
  std::vector<std::vector<std::size_t>> buckets = gradient_buckets(grads, layout);
  ScopeGuard in_reduction(g, "data_parallel");

  if (layout.zero == 0) {
    std::vector<Value> reduced(grads.size());
    for (const auto& bucket : buckets)
      for (const auto& [i, sum] : summed_bucket(grads, bucket, ranks))
        reduced[i] = reshape(sum, grads[i].shape());
    return append_update(g, names, params, reduced, options);
  }

  // ZeRO: each rank updates its shard of every parameter.
  Value rank = input_once(g, rank_input_name(), TensorType{DType::i32, {}});
  std::vector<Value> grad_shards(grads.size()), param_shards(grads.size());
  for (const auto& bucket : buckets) {
    if (layout.zero == 1) {
      for (const auto& [i, sum] : summed_bucket(grads, bucket, ranks))
        grad_shards[i] = own_shard(sum, ranks, rank);
    } else {
      // Rank-major: row r of every member's [ranks, shard] side by side, so rank r's block of
      // the reduce-scatter is its shard of each member.
      std::vector<Value> rows;
      for (std::size_t i : bucket)
        rows.push_back(shard_rows(grads[i], ranks));
      Value packed = join(rows, 1);
      int64_t width = packed.shape()[1];
      Value mine = reduce_scatter(reshape(packed, {ranks * width}), ranks);
      int64_t offset = 0;
      for (std::size_t i : bucket) {
        int64_t s = shard_elements(numel(grads[i].shape()), ranks);
        grad_shards[i] = slice(mine, {offset}, {offset + s});
        offset += s;
      }
    }
    for (std::size_t i : bucket)
      param_shards[i] = own_shard(params[i], ranks, rank);
  }
  auto sum_over_ranks = [&](Value partial) {
    return reshape(all_reduce(reshape(partial, {1}), ranks), partial.shape());
  };
  UpdateResult result = append_update(g, names, param_shards, grad_shards, options, sum_over_ranks);
  // The updated shards, all-gathered bucket by bucket back into whole parameters.
  for (const auto& bucket : buckets) {
    std::vector<Value> parts;
    for (std::size_t i : bucket)
      parts.push_back(result.parameters[i].parameter);
    Value packed = join(parts, 0);
    int64_t width = packed.shape()[0];
    Value gathered = reshape(all_gather(packed, ranks), {ranks, width});
    int64_t offset = 0;
    for (std::size_t i : bucket) {
      result.parameters[i].parameter = from_columns(gathered, offset, params[i].type(), ranks);
      offset += shard_elements(numel(params[i].shape()), ranks);
    }
  }
  return result;
}

std::vector<std::string> parameter_checksums(const std::vector<std::string>& names,
                                             std::span<HostTensor* const> parameters) {
  std::vector<std::string> lines;
  for (std::size_t i = 0; i < names.size(); ++i) {
    uint64_t hash = 1469598103934665603ull; // FNV-1a over the bytes
    for (std::byte b : parameters[i]->bytes())
      hash = (hash ^ static_cast<uint64_t>(b)) * 1099511628211ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
    lines.push_back("the values of parameter " + names[i] + " (checksum " + hex);
  }
  return lines;
}

void check_step_agrees(Communicator& communicator, const std::vector<std::string>& names,
                       std::span<HostTensor* const> parameters,
                       const std::vector<std::string>& batch_names,
                       std::span<const HostTensor> batch, const std::string& options) {
  std::vector<std::string> facts;
  for (std::size_t i = 0; i < names.size(); ++i)
    facts.push_back("parameter " + names[i] + " " +
                    to_string(TensorType{parameters[i]->dtype(), parameters[i]->shape()}));
  for (std::size_t j = 0; j < batch.size(); ++j)
    facts.push_back("batch input " + batch_names[j] + " " +
                    to_string(TensorType{batch[j].dtype(), batch[j].shape()}));
  facts.push_back(options);
  for (const std::string& line : parameter_checksums(names, parameters))
    facts.push_back(line + "; start every rank from the same Init seed or checkpoint)");
  check_ranks_agree(communicator, facts,
                    "the data-parallel step (parameters, their values, batch types, options)");
}

} // namespace sinter
