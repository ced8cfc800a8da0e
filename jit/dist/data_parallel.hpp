// jit/dist/data_parallel.hpp — the gradient reduction and sharded update of a data-parallel
// step, as graph ops: gradient buckets, all_reduce or reduce_scatter, ZeRO shards, all_gather
#pragma once
#include "jit/runtime/host_tensor.hpp"
#include "jit/train/optimizer.hpp"

#include <span>

#include <cstdint>
#include <string>
#include <vector>

namespace sinter {

class Communicator;

/// How the ranks of a data-parallel step share their work (docs/distributed.md).
struct DataParallelLayout {
  int ranks = 1;
  /// 0: every rank keeps the whole optimizer state and all-reduces the gradients. 1: each rank
  /// keeps and updates 1/ranks of every parameter's state, then the parameters are
  /// all-gathered. 2: as 1, and the gradients are reduce-scattered instead of all-reduced.
  int zero = 0;
  /// Gradients are reduced in buckets of about this many bytes, in the order the backward
  /// pass produces them; the first bucket holds at most 1 MiB so the first reduction starts
  /// early.
  int64_t bucket_bytes = int64_t{25} << 20;
};

/// Elements of one rank's shard of a tensor of `elements` elements: ceil(elements / ranks) (the
/// last shards are padded with zeros).
int64_t shard_elements(int64_t elements, int ranks);

/// The graph input holding this rank's index (i32 scalar), fed by the step at run time so
/// every rank compiles the same graph.
inline const char* rank_input_name() { return "dist.rank"; }

/// Groups of parameter indices reduced together, in the order `grads` are produced (by node
/// id), each of about `layout.bucket_bytes`.
std::vector<std::vector<std::size_t>> gradient_buckets(const std::vector<Value>& grads,
                                                       const DataParallelLayout& layout);

/// Appends the reduction of every rank's local `grads` (of the per-rank mean loss) and the
/// optimizer update to `g`. The returned parameters are whole on every rank; the returned
/// state is per shard (shape [shard_elements]) under ZeRO. The scaling by 1/ranks is left to
/// the update's `opt.grad_scale`.
UpdateResult append_data_parallel_update(Graph& g, const std::vector<std::string>& names,
                                         const std::vector<Value>& params,
                                         const std::vector<Value>& grads,
                                         const UpdateOptions& options,
                                         const DataParallelLayout& layout);

/// One line per parameter: its name and an FNV-1a checksum of its bytes (`the values of
/// parameter <name> (checksum <hex>`, left open for the caller's advice).
std::vector<std::string> parameter_checksums(const std::vector<std::string>& names,
                                             std::span<HostTensor* const> parameters);

/// Data parallel: every rank must train the same model from the same values on shards of the
/// same types, or the averaged gradients mean nothing. Compares the parameters (types and
/// values), the batch types and `options` across the ranks; every rank throws naming the
/// first difference.
void check_step_agrees(Communicator& communicator, const std::vector<std::string>& names,
                       std::span<HostTensor* const> parameters,
                       const std::vector<std::string>& batch_names,
                       std::span<const HostTensor> batch, const std::string& options);

} // namespace sinter
