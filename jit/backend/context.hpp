// jit/backend/context.hpp — Context: the one object holding process-wide backend state (thread
// pool, kernel cache, CPU kernels)
#pragma once
#include "jit/backend/cpu/kernel_library.hpp"
#include "jit/backend/cpu/thread_pool.hpp"
#include "jit/runtime/kernel_cache.hpp"

#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>

namespace sinter {

/// The worker pool and the kernel cache. The process uses Context::global(); tests build
/// their own so that nothing leaks between them.
class Context {
public:
  /// default_thread_count() threads and the cache at KernelCache::default_dir().
  /// Throws std::invalid_argument for a bad SINTER_NUM_THREADS.
  Context();
  Context(std::size_t threads, std::filesystem::path cache_dir);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ThreadPool& pool() { return pool_; }
  KernelCache& cache() { return cache_; }
  /// Compiled kernels of this process (starts LLVM on first use; thread-safe).
  KernelLibrary& kernels();

  /// The process-wide context, built on first use (thread-safe).
  static Context& global();

private:
  ThreadPool pool_;
  KernelCache cache_;
  std::once_flag kernels_once_;
  std::unique_ptr<KernelLibrary> kernels_;
};

} // namespace sinter
