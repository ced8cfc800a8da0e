// tests/backend_check.hpp — runs a graph compiled on the CPU and on the float64 interpreter
#pragma once
#include "jit/api.hpp"
#include "jit/runtime/cpu_executable.hpp"
#include "numeric_check.hpp"
#include "temp_dir.hpp"

#include <cstdlib>
#include <filesystem>
#include <memory>

namespace sinter::testing {

/// A private kernel cache, library and pool, so tests never touch the user's cache.
struct TestBackend {
  TempDir temp;
  std::filesystem::path dir;
  std::unique_ptr<KernelCache> cache;
  std::unique_ptr<KernelLibrary> library;
  ThreadPool pool{2};

  explicit TestBackend(const std::string& tag = "sinter-test")
      : temp(tag), dir(temp.path), cache(std::make_unique<KernelCache>(dir)),
        library(std::make_unique<KernelLibrary>(*cache)) {}

  /// A fresh library on the same directory: what a new process would see.
  void restart() { library = std::make_unique<KernelLibrary>(*cache); }
};

inline std::vector<HostTensor> as_host(const Graph& g, const std::vector<F64Tensor>& values) {
  std::vector<HostTensor> out;
  for (std::size_t i = 0; i < values.size(); ++i)
    out.push_back(from_f64(values[i], g.type(g.inputs()[i].id).dtype));
  return out;
}

} // namespace sinter::testing
