// jit/backend/context.cpp — construction of Context and the process-wide instance
#include "jit/backend/context.hpp"

namespace sinter {

Context::Context() : Context(default_thread_count(), KernelCache::default_dir()) {}

Context::Context(std::size_t threads, std::filesystem::path cache_dir)
    : pool_(threads), cache_(std::move(cache_dir)) {}

KernelLibrary& Context::kernels() {
  std::call_once(kernels_once_, [this] { kernels_ = std::make_unique<KernelLibrary>(cache_); });
  return *kernels_;
}

Context& Context::global() {
  // NOTE: the one sanctioned piece of global state (docs: STYLE.md); a function-local static
  // so it is built on first use, after the environment is set.
  static Context context;
  return context;
}

} // namespace sinter
