// jit/data/loader.hpp — DataLoader: shuffled, resumable, statically shaped batches, prefetched
#pragma once
#include "jit/data/dataset.hpp"
#include "jit/runtime/host_tensor.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace sinter::data {

struct LoaderOptions {
  int64_t batch_size = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  /// false: the last, short batch is padded with zero rows up to batch_size (see Batch::mask).
  bool drop_last = true;
  /// Background threads that fill batches ahead of `next`; 0 reads synchronously inside `next`.
  int prefetch_threads = 2;
  /// Batches filled ahead (the ring of reusable host buffers).
  int prefetch_depth = 2;
  /// Data parallel: this process takes rows [shard·b/shards, (shard+1)·b/shards) of every
  /// global batch of b = batch_size rows, from the same seeded order on every rank, so the
  /// ranks together see exactly the batches one process would. batch_size stays the global
  /// batch and must be a multiple of shards. Every rank has the same batches per epoch.
  int shard = 0;
  int shards = 1;
};

/// One batch; every batch of a loader has the same shapes, so a compiled step never retraces.
struct Batch {
  HostTensor examples; ///< [batch_size / shards, example dims...]
  HostTensor labels;   ///< [batch_size / shards, label dims...]
  HostTensor mask;     ///< f32 [batch_size / shards]: 1 for a real row, 0 for padding
  int64_t real_rows = 0;
};

/// The order in which an epoch visits a data set of `size` examples: a Fisher–Yates shuffle
/// driven by splitmix64 seeded from (seed, epoch) only, so a resumed run replays it exactly.
std::vector<std::size_t> epoch_order(std::size_t size, uint64_t seed, int64_t epoch);

/// Batches a Dataset epoch by epoch. Starts at epoch 0, batch 0. One consumer thread; the data
/// set must outlive the loader. A read error in a worker is rethrown by `next` (and by every
/// later `next` until `start_epoch` or `seek`).
class DataLoader {
public:
  struct Position {
    int64_t epoch = 0;
    int64_t batch = 0; ///< the next batch `next` hands out
    bool operator==(const Position&) const = default;
  };

  DataLoader(const Dataset& dataset, LoaderOptions options);
  ~DataLoader(); ///< stops and joins the workers, also mid-epoch
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t batches_per_epoch() const;
  /// Swaps the next batch into `out` (whose buffers are reused for a later batch when their
  /// shapes match); false once the epoch is over.
  bool next(Batch& out);
  /// Same as seek({epoch, 0}).
  void start_epoch(int64_t epoch);
  Position position() const;
  /// Continues from `position`: the following batches equal those an uninterrupted run sees.
  void seek(Position position);

private:
  struct State;
  std::unique_ptr<State> state_;
};

} // namespace sinter::data
