// jit/backend/cpu/thread_pool.cpp — the worker loop, chunking and exception hand-off of ThreadPool
#include "jit/backend/cpu/thread_pool.hpp"
#include "jit/settings.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sinter {

struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* body = nullptr;
  int64_t num_chunks = 0;
  int64_t base = 0;      // every chunk has `base` indices ...
  int64_t remainder = 0; // ... and the first `remainder` chunks one more
  std::atomic<int64_t> next_chunk{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;

  int64_t chunk_begin(int64_t i) const { return i * base + std::min(i, remainder); }
};

ThreadPool::ThreadPool(std::size_t threads) {
  std::size_t workers = threads > 1 ? threads - 1 : 0;
  workers_.reserve(workers);
  for (std::size_t i = 0; i < workers; ++i)
    workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_)
    worker.join();
}

void ThreadPool::run_chunks(Job& job) {
  for (;;) {
    if (job.failed.load(std::memory_order_relaxed)) return;
    int64_t i = job.next_chunk.fetch_add(1, std::memory_order_relaxed);
    if (i >= job.num_chunks) return;
    try {
      (*job.body)(job.chunk_begin(i), job.chunk_begin(i + 1));
    } catch (...) {
      std::lock_guard lock(job.error_mutex);
      if (!job.error) job.error = std::current_exception();
      job.failed.store(true, std::memory_order_relaxed);
    }
  }
}

void ThreadPool::worker_loop() {
  std::unique_lock lock(mutex_);
  // NOTE: start from the generation at construction, not the current one: a job posted before
  // this thread first took the lock must still be joined.
  std::uint64_t seen = 0;
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    Job* job = job_;
    // NOTE: a worker woken late may find the job already finished (job_ reset); it only
    // touches a job it registered in active_ under the lock, so the job outlives its use.
    if (job == nullptr) continue;
    ++active_;
    lock.unlock();
    run_chunks(*job);
    lock.lock();
    if (--active_ == 0) finished_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t count, int64_t min_chunk,
                              const std::function<void(int64_t, int64_t)>& body) {
  if (count <= 0) return;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  int64_t num_chunks = std::min<int64_t>(static_cast<int64_t>(size()), count / min_chunk);
  if (num_chunks <= 1 || busy_.exchange(true, std::memory_order_acquire)) {
    body(0, count);
    return;
  }
  struct ReleaseBusy {
    std::atomic<bool>& busy;
    ~ReleaseBusy() { busy.store(false, std::memory_order_release); }
  } release{busy_};

  Job job;
  job.body = &body;
  job.num_chunks = num_chunks;
  job.base = count / num_chunks;
  job.remainder = count % num_chunks;
  {
    std::lock_guard lock(mutex_);
    job_ = &job;
    ++generation_;
  }
  // Wake only as many workers as there are chunks beyond the caller's own.
  if (num_chunks - 1 >= static_cast<int64_t>(workers_.size())) {
    wake_.notify_all();
  } else {
    for (int64_t i = 1; i < num_chunks; ++i)
      wake_.notify_one();
  }
  run_chunks(job);
  {
    std::unique_lock lock(mutex_);
    job_ = nullptr;
    finished_.wait(lock, [&] { return active_ == 0; });
  }
  if (job.error) std::rethrow_exception(job.error);
}

namespace {
std::size_t thread_count_setting(const char* name) {
  const char* env = setting(name);
  if (env != nullptr && *env != '\0') {
    std::string_view text = env;
    std::size_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || value == 0 || value > 4096) {
      throw std::invalid_argument("sinter: " + std::string(name) + "='" + std::string(text) +
                                  "' is not a thread count; set it to an integer from 1 to 4096 "
                                  "or unset it to use every hardware thread");
    }
    return value;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}
} // namespace

std::size_t default_thread_count() { return thread_count_setting("SINTER_NUM_THREADS"); }

std::size_t compile_thread_count() { return thread_count_setting("SINTER_COMPILE_THREADS"); }

} // namespace sinter
