// jit/backend/device.hpp — Backend and Device: where a compiled graph runs
#pragma once
#include <string>
#include <string_view>

namespace sinter {

/// Where a compiled graph runs. Each value has one entry in the backend table
/// (jit/backend/backends.cpp).
enum class Backend {
  cpu,         ///< fused kernels through LLVM ORC, GEMMs through OpenBLAS (the default)
  interpreter, ///< the float64 reference interpreter (slow; the oracle of the tests)
  cuda,        ///< an NVIDIA GPU: kernels through LLVM NVPTX, GEMMs through cuBLASLt
};

/// A backend and, for numbered backends (CUDA), which device.
struct Device {
  Backend backend = Backend::cpu;
  int ordinal = 0; ///< cuda:N
  Device() = default;
  Device(Backend b, int gpu = 0) : backend(b), ordinal(gpu) {} // NOLINT: a backend is a device
  /// "cpu", "interpreter", "cuda" (= cuda:0) or "cuda:N"; anything else → std::invalid_argument
  /// listing what is accepted.
  static Device parse(std::string_view text);
  std::string name() const;
  bool operator==(const Device&) const = default;
};

} // namespace sinter
