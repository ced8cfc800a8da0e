// jit/backend/cuda/deferred_outputs.hpp — a CUDA step's outputs handed out before the step
// ends: staged in pinned memory, or resident in a carried input's device buffer, and the events
// of the input set they wait on
#pragma once
#include "jit/backend/cuda/cuda_device.hpp"
#include "jit/profile/profiler.hpp"
#include "jit/runtime/host_tensor.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

namespace sinter {

/// Events of one input set, shared with the values its runs handed out (which wait on them).
struct SetEvents {
  const cuda::Driver& driver;
  cuda::EventHandle uploaded = nullptr, started = nullptr, finished = nullptr;
  explicit SetEvents(const cuda::Driver& d) : driver(d) {
    for (cuda::EventHandle* e : {&uploaded, &started, &finished})
      d.check(d.cuEventCreate(e, 0), "cuEventCreate");
  }
  ~SetEvents() {
    for (cuda::EventHandle e : {uploaded, started, finished})
      if (e) driver.cuEventDestroy(e);
  }
};

/// A non-carried output of one run: in pinned staging until the set is reused, then kept here.
class StagedValue final : public DeferredBytes {
public:
  StagedValue(CudaDevice& device, std::shared_ptr<SetEvents> events, const std::byte* pinned,
              std::size_t bytes)
      : device_(device), events_(std::move(events)), pinned_(pinned), bytes_(bytes) {}
  /// Copies the value out of pinned memory, which the next run on its set overwrites.
  void preserve() const {
    if (preserved_) return;
    wait();
    kept_.assign(pinned_, pinned_ + bytes_);
    preserved_ = true;
  }
  void fetch(std::span<std::byte> into) const override {
    if (!preserved_) { // the host reads a result of a step that may still run: a sync
      const int64_t asked = profile::now_ns();
      wait();
      profile::device_read(asked, profile::now_ns());
    }
    const std::byte* from = preserved_ ? kept_.data() : pinned_;
    std::memcpy(into.data(), from, std::min(bytes_, into.size()));
  }

private:
  void wait() const {
    device_.make_current();
    device_.driver().check(device_.driver().cuEventSynchronize(events_->finished),
                           "cuEventSynchronize (waiting for a step's output)");
  }
  CudaDevice& device_;
  std::shared_ptr<SetEvents> events_;
  const std::byte* pinned_;
  std::size_t bytes_;
  mutable std::vector<std::byte> kept_;
  mutable bool preserved_ = false;
};

/// A carried output of one run: in the carried input's device buffer until the next run.
class ResidentValue final : public DeferredBytes {
public:
  ResidentValue(CudaDevice& device, std::shared_ptr<SetEvents> events, DeviceSpan buffer,
                std::shared_ptr<std::atomic<uint64_t>> runs, std::size_t bytes)
      : device_(device), events_(std::move(events)), buffer_(std::move(buffer)),
        runs_(std::move(runs)), run_(runs_->load()), bytes_(bytes) {}
  void fetch(std::span<std::byte> into) const override {
    if (runs_->load() != run_)
      throw std::logic_error("sinter: a GPU-resident value was read after a later step replaced "
                             "it; copy a tensor (HostTensor copies fetch) before the next step");
    device_.make_current();
    const cuda::Driver& d = device_.driver();
    const int64_t asked = profile::now_ns();
    d.check(d.cuEventSynchronize(events_->finished), "cuEventSynchronize");
    d.check(d.cuMemcpyDtoH(into.data(), buffer_.get(), std::min(bytes_, into.size())),
            "cuMemcpyDtoH (fetching a GPU-resident value)");
    profile::device_read(asked, profile::now_ns());
  }

private:
  CudaDevice& device_;
  std::shared_ptr<SetEvents> events_;
  DeviceSpan buffer_; // kept alive: the tensor may outlive the executable
  std::shared_ptr<std::atomic<uint64_t>> runs_;
  uint64_t run_;
  std::size_t bytes_;
};

} // namespace sinter
