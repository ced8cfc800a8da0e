// jit/data/loader.cpp — epoch orders, batch assembly and the prefetch ring of worker threads
#include "jit/data/loader.hpp"
#include "jit/profile/profiler.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>

namespace sinter::data {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void ensure_shape(HostTensor& t, DType dtype, const Shape& shape) {
  std::size_t bytes = static_cast<std::size_t>(numel(shape)) * dtype_bytes(dtype);
  if (t.dtype() != dtype || t.shape() != shape || t.bytes().size() != bytes)
    t = HostTensor(dtype, shape);
}

Shape batched(int64_t batch, const Shape& shape) {
  Shape out{batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

enum class SlotState { free, filling, ready };

/// One ring entry: the batch buffers and which batch of the current epoch they hold.
struct Slot {
  Batch batch;
  int64_t index = -1;
  SlotState state = SlotState::free;
  std::exception_ptr error;
};

} // namespace

std::vector<std::size_t> epoch_order(std::size_t size, uint64_t seed, int64_t epoch) {
  std::vector<std::size_t> order(size);
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Mixing the epoch before combining keeps (seed, epoch) pairs such as (1, 0) and (0, 1) apart.
  uint64_t mixer = static_cast<uint64_t>(epoch);
  uint64_t state = seed ^ splitmix64(mixer);
  for (std::size_t i = size; i > 1; --i) {
    std::size_t j = static_cast<std::size_t>(splitmix64(state) % i); // bias < i / 2^64
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

struct DataLoader::State {
  const Dataset& dataset;
  LoaderOptions options;
  TensorType example_type, label_type;
  std::size_t example_bytes, label_bytes;
  int64_t batches = 0;

  // Everything below is guarded by `mutex`, except that a worker reads `order` and its claimed
  // slot's batch without it: `order` only changes while no slot is being filled.
  mutable std::mutex mutex;
  std::condition_variable work_cv;  ///< a batch became claimable, or stop
  std::condition_variable ready_cv; ///< a slot finished filling
  int64_t epoch = 0;
  int64_t cursor = 0;     ///< the next batch handed out
  int64_t next_claim = 0; ///< the next batch a worker starts filling
  int filling = 0;        ///< slots being filled right now
  bool stop = false;
  std::exception_ptr error; ///< sticky until seek
  std::vector<std::size_t> order;
  std::vector<Slot> slots;
  std::vector<std::thread> workers;

  State(const Dataset& d, LoaderOptions o)
      : dataset(d), options(o), example_type(d.example_type()), label_type(d.label_type()),
        example_bytes(byte_size(example_type)), label_bytes(byte_size(label_type)) {}

  bool synchronous() const { return options.prefetch_threads == 0; }

  std::vector<std::size_t> order_of(int64_t e) const {
    if (options.shuffle) return epoch_order(dataset.size(), options.seed, e);
    std::vector<std::size_t> identity(dataset.size());
    std::iota(identity.begin(), identity.end(), std::size_t{0});
    return identity;
  }

  void fill(int64_t index, Batch& out) const {
    const int64_t rows = options.batch_size / options.shards;
    const int64_t begin = index * options.batch_size + options.shard * rows;
    const int64_t real = std::clamp<int64_t>(static_cast<int64_t>(order.size()) - begin, 0, rows);
    ensure_shape(out.examples, example_type.dtype, batched(rows, example_type.shape));
    ensure_shape(out.labels, label_type.dtype, batched(rows, label_type.shape));
    ensure_shape(out.mask, DType::f32, {rows});
    std::byte* examples = out.examples.bytes().data();
    std::byte* labels = out.labels.bytes().data();
    for (int64_t r = 0; r < real; ++r)
      dataset.read(order[static_cast<std::size_t>(begin + r)],
                   examples + static_cast<std::size_t>(r) * example_bytes,
                   labels + static_cast<std::size_t>(r) * label_bytes);
    auto padding = static_cast<std::size_t>(rows - real);
    std::memset(examples + static_cast<std::size_t>(real) * example_bytes, 0,
                padding * example_bytes);
    std::memset(labels + static_cast<std::size_t>(real) * label_bytes, 0, padding * label_bytes);
    auto* mask = reinterpret_cast<float*>(out.mask.bytes().data());
    std::fill(mask, mask + real, 1.0f);
    std::fill(mask + real, mask + rows, 0.0f);
    out.real_rows = real;
  }

  bool claimable() const {
    return next_claim < batches && next_claim < cursor + options.prefetch_depth;
  }

  void work() {
    std::unique_lock lock(mutex);
    for (;;) {
      work_cv.wait(lock, [&] { return stop || claimable(); });
      if (stop) return;
      int64_t index = next_claim++;
      // The ring holds batches [cursor, next_claim), fewer than depth, so this slot's previous
      // batch (index - depth) has been handed out already.
      Slot& slot = slots[static_cast<std::size_t>(index % options.prefetch_depth)];
      slot.state = SlotState::filling;
      slot.index = index;
      slot.error = nullptr;
      ++filling;
      lock.unlock();
      std::exception_ptr failure;
      const int64_t began = profile::now_ns();
      try {
        fill(index, slot.batch);
      } catch (...) {
        failure = std::current_exception();
      }
      profile::loader_fill(began, profile::now_ns(), index);
      lock.lock();
      --filling;
      slot.state = SlotState::ready;
      slot.error = failure;
      ready_cv.notify_all();
    }
  }
};

DataLoader::DataLoader(const Dataset& dataset, LoaderOptions options)
    : state_(std::make_unique<State>(dataset, options)) {
  State& s = *state_;
  auto n = static_cast<int64_t>(dataset.size());
  if (options.batch_size < 1)
    throw std::invalid_argument("sinter: DataLoader batch_size " +
                                std::to_string(options.batch_size) + " must be at least 1");
  if (options.shards < 1 || options.shard < 0 || options.shard >= options.shards)
    throw std::invalid_argument("sinter: DataLoader shard " + std::to_string(options.shard) +
                                " of " + std::to_string(options.shards) +
                                ": the shard must be in [0, shards) and shards at least 1");
  if (options.batch_size % options.shards != 0)
    throw std::invalid_argument(
        "sinter: DataLoader batch_size " + std::to_string(options.batch_size) +
        " (the global batch) does not split into " + std::to_string(options.shards) +
        " equal shards; use a multiple of " + std::to_string(options.shards));
  if (options.prefetch_threads < 0 || options.prefetch_depth < 1)
    throw std::invalid_argument(
        "sinter: DataLoader needs prefetch_threads >= 0 and prefetch_depth >= 1, got " +
        std::to_string(options.prefetch_threads) + " and " +
        std::to_string(options.prefetch_depth));
  s.batches = options.drop_last ? n / options.batch_size
                                : (n + options.batch_size - 1) / options.batch_size;
  if (s.batches == 0)
    throw std::invalid_argument(
        "sinter: DataLoader over " + std::to_string(n) + " examples with batch_size " +
        std::to_string(options.batch_size) + (options.drop_last ? " and drop_last" : "") +
        " would yield no batches; use a smaller batch_size or drop_last = false");
  s.order = s.order_of(0);
  if (!s.synchronous()) {
    s.slots.resize(static_cast<std::size_t>(options.prefetch_depth));
    for (int t = 0; t < options.prefetch_threads; ++t)
      s.workers.emplace_back([&s] { s.work(); });
  }
}

DataLoader::~DataLoader() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    s.stop = true;
  }
  s.work_cv.notify_all();
  for (auto& worker : s.workers)
    worker.join();
}

int64_t DataLoader::batches_per_epoch() const { return state_->batches; }

bool DataLoader::next(Batch& out) {
  State& s = *state_;
  if (profile::active()) profile::loader_threads(s.options.prefetch_threads);
  if (s.synchronous()) {
    if (s.cursor >= s.batches) return false;
    const int64_t began = profile::now_ns(); // read here: all of it is waiting for data
    s.fill(s.cursor, out);
    profile::data_wait(began, profile::now_ns());
    ++s.cursor;
    return true;
  }
  std::unique_lock lock(s.mutex);
  if (s.error) std::rethrow_exception(s.error);
  if (s.cursor >= s.batches) return false;
  Slot& slot = s.slots[static_cast<std::size_t>(s.cursor % s.options.prefetch_depth)];
  const int64_t began = profile::now_ns();
  s.ready_cv.wait(lock, [&] { return slot.state == SlotState::ready && slot.index == s.cursor; });
  profile::data_wait(began, profile::now_ns());
  if (slot.error) {
    s.error = slot.error;
    std::rethrow_exception(s.error);
  }
  std::swap(out, slot.batch);
  slot.state = SlotState::free;
  ++s.cursor;
  lock.unlock();
  s.work_cv.notify_one();
  return true;
}

void DataLoader::start_epoch(int64_t epoch) { seek({epoch, 0}); }

DataLoader::Position DataLoader::position() const {
  std::lock_guard lock(state_->mutex);
  return {state_->epoch, state_->cursor};
}

void DataLoader::seek(Position position) {
  State& s = *state_;
  if (position.epoch < 0 || position.batch < 0 || position.batch > s.batches)
    throw std::invalid_argument(
        "sinter: DataLoader::seek to epoch " + std::to_string(position.epoch) + ", batch " +
        std::to_string(position.batch) + ": expected epoch >= 0 and batch in 0.." +
        std::to_string(s.batches));
  std::vector<std::size_t> order = s.order_of(position.epoch);

  std::unique_lock lock(s.mutex);
  // Stop new claims, then wait for the fills in flight: they read `order` and their slot.
  s.next_claim = s.batches;
  s.ready_cv.wait(lock, [&] { return s.filling == 0; });
  s.order = std::move(order);
  s.epoch = position.epoch;
  s.cursor = s.next_claim = position.batch;
  s.error = nullptr;
  for (Slot& slot : s.slots) {
    slot.state = SlotState::free;
    slot.index = -1;
    slot.error = nullptr;
  }
  lock.unlock();
  s.work_cv.notify_all();
}

} // namespace sinter::data
