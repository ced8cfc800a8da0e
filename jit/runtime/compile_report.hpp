// jit/runtime/compile_report.hpp — CompileReport: what compiling one step did with its kernels
#pragma once
#include "jit/ir/graph.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace sinter {

struct FusionPlan;

/// Where one generated kernel came from, by the node its kernel writes first.
struct KernelOrigin {
  enum class From { compiled, disk, memory };
  ValueId root = 0;
  From from = From::compiled;
  std::string symbol;
};

/// What one compile (one executable) did for its kernels.
struct CompileReport {
  std::size_t kernels = 0;           ///< all kernels of the step, GEMMs included
  std::size_t generated = 0;         ///< kernels that went through code generation
  std::size_t compiled = 0;          ///< compiled by LLVM now
  std::size_t from_memory = 0;       ///< already loaded in this process
  std::size_t from_disk = 0;         ///< loaded from the persistent cache
  double seconds = 0;                ///< wall time of the whole compile
  std::vector<KernelOrigin> origins; ///< one per generated kernel, in lookup order

  /// SINTER_DUMP=kernels: the counts, then each kernel of `plan` with its kind and, for a
  /// generated one, where it came from and its symbol (library calls: GEMMs, attention on the
  /// CPU, collectives).
  std::string print(const FusionPlan& plan) const;
};

} // namespace sinter
