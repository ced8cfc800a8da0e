// jit/profile/numerics_check.hpp — --check-numerics: the first kernel output that is not finite,
// traced to the op that made it
#pragma once
#include "jit/passes/fuse.hpp"

#include <stdexcept>
#include <string>
#include <vector>

namespace sinter {

/// Thrown by a step that made a non-finite value while numerics are checked. what() names the
/// op that made it, its model path and role, and which of its operands already held one (or a
/// graph input that arrived with it).
class NumericsError : public std::runtime_error {
public:
  explicit NumericsError(const std::string& what) : std::runtime_error(what) {}
};

/// Whether kernels' outputs are checked: set_check_numerics(), else SINTER_CHECK_NUMERICS=1.
bool check_numerics_enabled();
void set_check_numerics(bool on);

/// With checking on, called after kernel `index` of `plan` ran (`pointer[v]`: where buffer v
/// lives): throws NumericsError if a floating-point output holds inf or NaN. The origin is found
/// by evaluating the kernel's nodes one by one in float64 on its operands: the first node whose
/// value leaves its dtype's finite range while its operands are finite.
void check_kernel_numerics(const FusionPlan& plan, std::size_t index,
                           const std::vector<void*>& pointer);

} // namespace sinter
