// jit/io/sharded_checkpoint.hpp — checkpoints whose optimizer state is split over the ranks of
// a job (ZeRO): one shard file per rank plus an index, read back at any world size, and
// consolidated into one safetensors file
#pragma once
#include "jit/io/checkpoint.hpp"

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sinter {

class Communicator;

using NamedTensors = std::vector<std::pair<std::string, const HostTensor*>>;

/// One rank's part of a tensor that is split over the ranks: the flattened whole, padded with
/// zeros to ranks × shard elements, cut into ranks pieces of shard elements; `piece` is piece
/// `rank` ([shard]).
struct ShardedTensor {
  std::string name;
  const HostTensor* piece = nullptr;
  Shape whole; ///< the tensor's own shape
};

/// Writes a checkpoint from every rank of `ranks` (a collective: every rank calls it with its
/// own `shards`, in the same order). Each rank writes its pieces to
/// `<stem>.step<S>.rank<r>-of-<N>.safetensors` beside `index`, atomically; once every rank's
/// file is complete, rank 0 writes `index` (atomically) with the `whole` tensors, the
/// metadata, and the list and shapes of the sharded ones, then removes the shard files of
/// the checkpoint it replaced: only names of that pattern (same stem) that the old index
/// listed and that are regular files beside it; anything else the old list names (another
/// folder, `..`, an absolute path, another file) is left alone. An interrupted save leaves
/// the previous checkpoint whole.
void save_sharded_checkpoint(const std::filesystem::path& index, const NamedTensors& whole,
                             const std::vector<ShardedTensor>& shards,
                             std::map<std::string, std::string> metadata, Communicator& ranks,
                             int64_t step);

/// Reads a checkpoint written by save_safetensors (every tensor whole) or by
/// save_sharded_checkpoint (an index and its shard files), at any world size: each rank asks
/// for a tensor whole or for its piece of it.
class CheckpointReader {
public:
  /// Throws std::runtime_error naming the file when the index or a shard file it lists is
  /// missing, truncated or corrupt, or when the index lists a shard file that is not a plain
  /// name beside it (a folder part, `..`, an absolute path). A shard is read when first needed,
  /// and refused, naming it, unless it is this save's piece: its step, rank, rank count and
  /// save id agree with the index, and its tensors have the dtype of the first shard's.
  explicit CheckpointReader(std::filesystem::path index);
  ~CheckpointReader();

  const std::map<std::string, std::string>& metadata() const { return index_.metadata; }
  /// The shard files the index lists (none for a whole checkpoint), beside it.
  const std::vector<std::string>& shard_names() const { return shard_names_; }
  bool contains(const std::string& name) const;
  /// Tensor `name` as `dtype` `shape` whole (pieces == 1) or piece `rank` of `pieces` of it.
  /// Throws std::runtime_error naming the tensor when it is missing or has another type.
  HostTensor read(const std::string& name, DType dtype, const Shape& shape, int pieces = 1,
                  int rank = 0);
  /// Every tensor, whole.
  std::map<std::string, HostTensor> all();
  /// The tensors whose names start with `prefix`, whole (e.g. a sifter's `sift.` state).
  std::map<std::string, HostTensor> with_prefix(const std::string& prefix);

private:
  HostTensor whole(const std::string& name);
  const Checkpoint& shard_file(std::size_t i);

  std::filesystem::path path_;
  Checkpoint index_;
  std::vector<std::string> shard_names_;
  std::map<std::string, Shape> sharded_shapes_;
  std::vector<std::unique_ptr<Checkpoint>> shard_files_;
};

/// Writes the checkpoint at `index` (sharded or not) as one safetensors file `out` holding
/// every tensor whole (atomically): what PyTorch's safetensors reads, and what any world size
/// resumes from.
void consolidate_checkpoint(const std::filesystem::path& index, const std::filesystem::path& out);

} // namespace sinter
