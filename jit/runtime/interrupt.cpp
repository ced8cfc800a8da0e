// jit/runtime/interrupt.cpp — the pending-interrupt flag
#include "jit/runtime/interrupt.hpp"

#include <atomic>

namespace sinter {
namespace {
std::atomic<bool> pending{false};
static_assert(std::atomic<bool>::is_always_lock_free, "a signal handler sets it");
} // namespace

void request_interrupt() noexcept { pending.store(true, std::memory_order_relaxed); }
void clear_interrupt() noexcept { pending.store(false, std::memory_order_relaxed); }
bool take_interrupt() noexcept { return pending.exchange(false, std::memory_order_relaxed); }

} // namespace sinter
