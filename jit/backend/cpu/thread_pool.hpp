// jit/backend/cpu/thread_pool.hpp — ThreadPool: persistent workers that run parallel_for chunks
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sinter {

/// A fixed set of worker threads, started once, sleeping on a condition variable between
/// calls. The calling thread takes part in every parallel_for, so `size()` threads work on it.
class ThreadPool {
public:
  /// `threads` counts the caller too: ThreadPool(1) starts no worker and runs everything inline.
  explicit ThreadPool(std::size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// The number of threads a parallel_for can use, the caller included.
  std::size_t size() const { return workers_.size() + 1; }

  /// Splits [0, count) into at most size() contiguous chunks of at least `min_chunk` indices,
  /// runs them on the workers and the caller, and returns when all are done. The first
  /// exception thrown by a chunk is rethrown here (chunks not yet started are then skipped).
  /// NOTE: a call made while the pool is already busy (from inside a body, or from a second
  /// thread) runs inline on its caller instead of waiting, so nesting cannot deadlock.
  void parallel_for(int64_t count, int64_t min_chunk,
                    const std::function<void(int64_t begin, int64_t end)>& body);

private:
  struct Job;
  void worker_loop();
  static void run_chunks(Job& job);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;     // workers wait here for a new job (or stop)
  std::condition_variable finished_; // the caller waits here for active_ to drop to 0
  Job* job_ = nullptr;               // the job workers may join; guarded by mutex_
  std::uint64_t generation_ = 0;     // bumped for every job; guarded by mutex_
  std::size_t active_ = 0;           // workers inside job_; guarded by mutex_
  bool stop_ = false;                // guarded by mutex_
  std::atomic<bool> busy_{false};    // a parallel_for is running on the workers
};

/// `SINTER_NUM_THREADS` when set (a positive integer; anything else throws
/// std::invalid_argument naming the variable and the value), else the hardware thread count.
std::size_t default_thread_count();
/// `SINTER_COMPILE_THREADS` when set (validated the same way), else the hardware thread count:
/// the threads a GPU compile generates and assembles its kernels on, whatever the CPU
/// runtime's count (a GPU step's speed does not depend on it; its cold compile does).
std::size_t compile_thread_count();

} // namespace sinter
