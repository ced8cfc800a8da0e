// jit/train/max_batch.cpp — searching the largest batch that fits a memory budget, and the
// out-of-memory report
#include "jit/train/max_batch.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace sinter {

std::vector<HostTensor> resized_batch(std::span<const HostTensor> example, int64_t batch) {
  std::vector<HostTensor> out;
  for (const HostTensor& t : example) {
    if (t.shape().empty())
      throw std::invalid_argument("sinter: a batch input is a scalar; the batch size is dim 0 of "
                                  "every batch input, so each must have at least one dim");
    Shape shape = t.shape();
    shape[0] = batch;
    out.emplace_back(t.dtype(), shape); // never written: planning reads only types
  }
  return out;
}

std::string MaxBatch::line() const {
  return "max_batch=" + std::to_string(batch) + " peak_bytes=" + std::to_string(peak_bytes) +
         " next_peak_bytes=" + std::to_string(next_peak_bytes) +
         " budget_bytes=" + std::to_string(budget_bytes);
}

MaxBatch search_max_batch(std::span<const HostTensor> example, int64_t budget_bytes,
                          const PlannedPeak& planned_peak) {
  if (example.empty())
    throw std::invalid_argument("sinter: max_batch needs an example batch (one tensor per batch "
                                "input; dim 0 is the batch size)");
  MaxBatch r;
  r.budget_bytes = budget_bytes;
  std::map<int64_t, int64_t> peaks;
  auto peak = [&](int64_t b) {
    if (auto it = peaks.find(b); it != peaks.end()) return it->second;
    ++r.plans;
    return peaks[b] = planned_peak(resized_batch(example, b));
  };
  constexpr int64_t most = int64_t{1} << 24;
  int64_t lo = 1, plo = peak(1), hi = 0, phi = 0; // peak(lo) fits; peak(hi) does not (0: unknown)
  if (plo > budget_bytes) {
    r.next_peak_bytes = plo;
    return r;
  }
  auto probe = [&](int64_t b) {
    int64_t p = peak(b);
    if (p <= budget_bytes) {
      lo = b;
      plo = p;
    } else {
      hi = b;
      phi = p;
    }
  };
  probe(8);
  const int64_t p1 = peaks.at(1);
  // The peak grows almost linearly with the batch: extrapolate to the budget, then settle the
  // bracket by interpolation, probing either side of each estimate (bisection if that stalls).
  // `probe` moves lo and hi (a loop condition on them that clang cannot see change).
  for (int rounds = 0;; ++rounds) {
    if (hi != 0 && hi - lo <= 1) break;
    if (hi == 0) {
      double slope = lo > 1 ? static_cast<double>(plo - p1) / static_cast<double>(lo - 1) : 0;
      double estimate =
          slope > 0 ? static_cast<double>(lo) + static_cast<double>(budget_bytes - plo) / slope
                    : 2.0 * static_cast<double>(lo);
      int64_t next = std::max(lo + 1, static_cast<int64_t>(estimate * 1.01) + 1);
      if (lo >= most)
        throw std::invalid_argument("sinter: max_batch: even a batch of " + std::to_string(most) +
                                    " fits the budget; the budget is too large to search");
      probe(std::min(next, most));
      continue;
    }
    int64_t next;
    if (rounds < 12) {
      double t = static_cast<double>(budget_bytes - plo) / static_cast<double>(phi - plo);
      next = lo + static_cast<int64_t>(t * static_cast<double>(hi - lo));
    } else {
      next = lo + (hi - lo) / 2;
    }
    next = std::clamp(next, lo + 1, hi - 1);
    probe(next);
    if (lo == next && next + 1 < hi)
      probe(next + 1);
    else if (hi == next && next - 1 > lo)
      probe(next - 1);
  }
  r.batch = lo;
  r.peak_bytes = plo;
  r.next_peak_bytes = phi;
  return r;
}

std::string out_of_memory_report(const std::string& device, std::span<const HostTensor> batch,
                                 const StepMemory& planned, int64_t available,
                                 const std::string& cause, const PlannedPeak& peak) {
  std::string types;
  for (const HostTensor& t : batch)
    types += (types.empty() ? "" : ", ") + to_string(TensorType{t.dtype(), t.shape()});
  std::string message =
      "sinter: out of memory on " + device + " for the step on batch " + types + ": " + cause +
      "\n  planned peak " + format_bytes(planned.total()) + " (arena " +
      format_bytes(planned.arena) + ", inputs " + format_bytes(planned.inputs) + ", outputs " +
      format_bytes(planned.outputs) + ", workspace " + format_bytes(planned.workspace) +
      ", kernels and graphs " + format_bytes(planned.runtime) + "); free " +
      format_bytes(available) + "\n  largest buffers:";
  for (const PlannedBuffer& b : planned.largest)
    message += "\n    " + format_bytes(b.bytes) + "  " + b.what;
  try {
    MaxBatch fit = search_max_batch(batch, available, peak);
    message +=
        "\n  largest batch that fits: " + std::to_string(fit.batch) + " (" + fit.line() + ")" +
        (fit.batch > 0
             ? " — pass a batch of at most " + std::to_string(fit.batch) +
                   " (recipes: --batch-size " + std::to_string(fit.batch) + " or --batch-size max)"
             : " — not even one example fits: use a smaller model or AMP");
  } catch (const std::exception& e) {
    message += std::string("\n  (no batch size could be planned: ") + e.what() + ")";
  }
  return message;
}

} // namespace sinter
