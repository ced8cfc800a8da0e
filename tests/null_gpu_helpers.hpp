// tests/null_gpu_helpers.hpp — what the null-driver tests share: the driver's counters, a
// default device on cuda for a test's length, a small MLP to train
#pragma once
#include "dsl/sinter.hpp"
#include "jit/backend/cuda/cuda_driver.hpp"
#include "support/null_cuda/null_gpu.h"

#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <optional>
#include <string>

namespace sinter::testing {

/// The null driver's own entry points (the library sinter loaded for SINTER_NULL_GPU=1).
template <class Fn> Fn* null_gpu_entry(const char* name) {
  std::optional<std::string> path = cuda::null_gpu_library();
  REQUIRE(path);
  void* library = dlopen(path->c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(library);
  auto* entry = reinterpret_cast<Fn*>(dlsym(library, name));
  REQUIRE(entry);
  return entry;
}

inline NullGpuCounters counters() {
  NullGpuCounters c{};
  null_gpu_entry<void(NullGpuCounters*)>("sinterNullGpuCounters")(&c);
  return c;
}

inline void reset_counters() { null_gpu_entry<void()>("sinterNullGpuResetCounters")(); }

inline int64_t cuda_free_bytes() { return free_memory(Device(Backend::cuda, 0)); }

struct DefaultDeviceCuda {
  Device was = default_device();
  DefaultDeviceCuda() { set_default_device(Device(Backend::cuda, 0)); }
  ~DefaultDeviceCuda() { set_default_device(was); }
};

struct Mlp {
  BOOST_HANA_DEFINE_STRUCT(Mlp, (Linear, first), (Linear, second));
  Mlp(int64_t width, Init& init) : first(width, width, init), second(width, 10, init) {}
  Var operator()(Var x) { return second(relu(first(x))); }
};

} // namespace sinter::testing
