// jit/runtime/interrupt.hpp — a pending interrupt (a notebook's Stop button, SIGINT) that the next
// training step turns into an exception
#pragma once
#include <stdexcept>

namespace sinter {

/// Thrown by a training step called while an interrupt is pending: the loop stops between
/// steps, with every parameter and the optimizer state as the last finished step left them.
struct Interrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Asks the next training step to throw Interrupted. Async-signal-safe (one atomic store): a
/// SIGINT handler may call it.
void request_interrupt() noexcept;
/// Drops a pending request (a new notebook cell starts clean).
void clear_interrupt() noexcept;
/// Whether a request is pending; taking it clears it.
bool take_interrupt() noexcept;

} // namespace sinter
