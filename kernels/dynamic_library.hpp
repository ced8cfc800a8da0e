// kernels/dynamic_library.hpp — resolving a vendor library's entry points by name (the library
// opened by cuda::open_cuda_library), so sinter builds and runs without it (cuBLASLt, NCCL)
#pragma once
#include <dlfcn.h>

#include <string>
#include <type_traits>

namespace sinter::kernels {

/// Fills function pointers from a library by symbol name, remembering the names it lacks.
class EntryPoints {
public:
  explicit EntryPoints(void* library) : library_(library) {}
  template <class Fn> void need(Fn& slot, const char* name) {
    if (void* symbol = dlsym(library_, name))
      slot = reinterpret_cast<std::remove_reference_t<Fn>>(symbol);
    else
      missing_ += std::string(missing_.empty() ? "" : ", ") + name;
  }
  /// The names not found, comma-separated (empty when all were).
  const std::string& missing() const { return missing_; }

private:
  void* library_;
  std::string missing_;
};

} // namespace sinter::kernels
