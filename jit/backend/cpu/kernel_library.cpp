// jit/backend/cpu/kernel_library.cpp — CPU kernels through the shared lookup: object files
// compiled by the ORC target, linked into the JIT on load
#include "jit/backend/cpu/kernel_library.hpp"

namespace sinter {

KernelEntry KernelLibrary::get(const FusionPlan& plan, const Kernel& kernel,
                               CompileReport& report) {
  return lookup_.get(
      plan, kernel, disk_, report,
      [&](const std::string& symbol) { return target_.compile(plan, kernel, symbol); },
      [&](std::span<const char> object, const std::string& symbol) {
        return target_.load(object, symbol);
      });
}

} // namespace sinter
