// jit/runtime/compile_report.hpp — CompileReport: what compiling one step did with its kernels
#pragma once
#include <cstddef>

namespace sinter {

/// What one compile (one executable) did for its kernels.
struct CompileReport {
  std::size_t kernels = 0;     ///< all kernels of the step, GEMMs included
  std::size_t generated = 0;   ///< kernels that went through code generation
  std::size_t compiled = 0;    ///< compiled by LLVM now
  std::size_t from_memory = 0; ///< already loaded in this process
  std::size_t from_disk = 0;   ///< loaded from the persistent cache
  double seconds = 0;          ///< wall time of the whole compile
};

} // namespace sinter
