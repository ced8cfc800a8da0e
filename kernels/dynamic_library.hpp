// kernels/dynamic_library.hpp — opening a vendor library with dlopen and resolving its entry
// points by name, so sinter builds and runs without it (cuBLASLt, NCCL)
#pragma once
#include <dlfcn.h>

#include <string>
#include <type_traits>
#include <vector>

namespace sinter::kernels {

/// The first of `names` that dlopen opens (RTLD_NOW | RTLD_LOCAL), or null.
inline void* open_first(const std::vector<std::string>& names) {
  for (const std::string& name : names)
    if (void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  return nullptr;
}

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
