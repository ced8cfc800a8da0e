// jit/train/max_batch.hpp — the largest batch whose planned memory fits a budget, and the
// out-of-memory report that names it
#pragma once
#include "jit/runtime/host_tensor.hpp"
#include "jit/runtime/memory_plan.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace sinter {

/// The answer of TrainStep::max_batch.
struct MaxBatch {
  int64_t batch = 0;           ///< the largest batch that fits (0: not even one)
  int64_t peak_bytes = 0;      ///< the planned peak at `batch` (at 1 when batch is 0)
  int64_t next_peak_bytes = 0; ///< the planned peak at batch + 1
  int64_t budget_bytes = 0;
  int64_t plans = 0; ///< memory plans the search made
  /// `max_batch=N peak_bytes=P next_peak_bytes=Q budget_bytes=M`
  std::string line() const;
};

/// `example` with dim 0 of every tensor set to `batch` (uninitialised: for planning).
std::vector<HostTensor> resized_batch(std::span<const HostTensor> example, int64_t batch);

/// The planned peak of a step on a batch of these types.
using PlannedPeak = std::function<int64_t(std::span<const HostTensor> batch)>;

/// The largest batch (dim 0 of every input of `example`) whose `peak` fits `budget_bytes`:
/// extrapolated, then bracketed by interpolation (bisection if that stalls).
MaxBatch search_max_batch(std::span<const HostTensor> example, int64_t budget_bytes,
                          const PlannedPeak& peak);

/// The message of an OutOfMemory for a step on `batch` on `device`: the cause, the plan, its
/// largest buffers, and the largest batch that fits `available` (searched with `peak`).
std::string out_of_memory_report(const std::string& device, std::span<const HostTensor> batch,
                                 const StepMemory& planned, int64_t available,
                                 const std::string& cause, const PlannedPeak& peak);

} // namespace sinter
