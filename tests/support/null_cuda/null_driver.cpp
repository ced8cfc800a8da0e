// tests/support/null_cuda/null_driver.cpp — the CUDA Driver API entry points sinter loads from
// libcuda.so.1 (devices, contexts, memory, copies, streams, events, launches, graphs), checked
// as strictly as the driver checks them, running nothing; modules are null_modules.cpp's
#include "null_state.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>

using namespace sinter::null_gpu;

namespace {

/// SINTER_NULL_GPU_FILL: `nan` fills fresh device memory (with copies on) with all-ones bytes.
bool fill_with_nan() {
  const char* fill = std::getenv("SINTER_NULL_GPU_FILL");
  return fill && std::string_view(fill) == "nan";
}

/// What kernels/cuda/non_finite_scan.cpp's kernel does, on the backed device memory:
/// parameters (data, count, element bytes, exponent mask, found word).
std::function<void()> emulated_scan(void** parameters) {
  uint64_t data = 0, count = 0, mask = 0, found = 0;
  uint32_t element_bytes = 0;
  std::memcpy(&data, parameters[0], 8);
  std::memcpy(&count, parameters[1], 8);
  std::memcpy(&element_bytes, parameters[2], 4);
  std::memcpy(&mask, parameters[3], 8);
  std::memcpy(&found, parameters[4], 8);
  return [=] {
    auto* word = reinterpret_cast<uint64_t*>(found);
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t bits = 0;
      std::memcpy(&bits, reinterpret_cast<const void*>(data + i * element_bytes), element_bytes);
      if ((bits & mask) == mask) *word = std::max(*word, ~i);
    }
  };
}

using DevicePtr = unsigned long long;

/// Streams this thread is capturing: CUDA refuses "unsafe" calls (allocations, synchronous
/// copies, synchronisation) from it meanwhile, and the capture is then invalidated.
thread_local std::vector<StreamState*> capturing_here;

int refuse_during_capture(State& s, const char* call) {
  if (capturing_here.empty()) return success;
  for (StreamState* stream : capturing_here) {
    stream->capture_broken = true;
    stream->capture_error = std::string(call) + " during capture";
  }
  return s.fail(capture_unsupported, std::string(call) +
                                         " was called while this thread captures a stream; "
                                         "CUDA forbids it and invalidates the capture");
}

struct GraphExecState {
  GraphState graph;
  uint64_t frees_at_instantiate = 0;
};

} // namespace

NULL_GPU_API int cuInit(unsigned flags) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (flags != 0) return s.fail(invalid_value, "cuInit takes flags 0");
  if (!s.spec_error.empty()) return s.fail(invalid_value, s.spec_error);
  s.initialized = true;
  return success;
}

NULL_GPU_API int cuDriverGetVersion(int* version) {
  if (!version) return invalid_value;
  *version = 13000;
  return success;
}

NULL_GPU_API int cuGetErrorName(int status, const char** name) {
  if (!name) return invalid_value;
  *name = status_name(status);
  return *name ? success : invalid_value;
}

NULL_GPU_API int cuGetErrorString(int status, const char** text) {
  if (!text) return invalid_value;
  // The driver's text, and what the null driver found wrong when it failed this thread's last
  // call with this status: "null driver: parameter 2 of k_3 points outside any allocation".
  thread_local std::string message;
  const char* generic = status_text(status);
  if (!generic) {
    *text = nullptr;
    return invalid_value;
  }
  message = generic;
  if (State::last_status() == status && !State::last_detail().empty())
    message += "; null driver: " + State::last_detail();
  *text = message.c_str();
  return success;
}

NULL_GPU_API int cuDeviceGetCount(int* count) {
  State& s = State::get();
  if (!s.initialized) return s.fail(not_initialized, "call cuInit first");
  *count = s.spec.count;
  return success;
}

NULL_GPU_API int cuDeviceGet(int* device, int ordinal) {
  State& s = State::get();
  if (!s.initialized) return s.fail(not_initialized, "call cuInit first");
  if (ordinal < 0 || ordinal >= s.spec.count)
    return s.fail(invalid_device, "device " + std::to_string(ordinal) + " of " +
                                      std::to_string(s.spec.count) +
                                      " (count= in "
                                      "SINTER_NULL_GPU_DEVICE)");
  *device = ordinal;
  return success;
}

NULL_GPU_API int cuDeviceGetName(char* name, int size, int device) {
  State& s = State::get();
  if (device < 0 || device >= s.spec.count) return invalid_device;
  std::snprintf(name, static_cast<std::size_t>(size), "%s", s.spec.name.c_str());
  return success;
}

NULL_GPU_API int cuDeviceTotalMem_v2(std::size_t* bytes, int device) {
  State& s = State::get();
  if (device < 0 || device >= s.spec.count) return invalid_device;
  *bytes = s.spec.memory;
  return success;
}

namespace {
/// Dense bf16 tensor-core FLOPs per clock per SM (as jit/backend/cuda/cost_model.cpp).
double tensor_flops_per_sm(int compute_capability) {
  if (compute_capability >= 100) return 8192;
  if (compute_capability >= 90) return 4096;
  if (compute_capability == 80) return 2048;
  return 1024;
}
} // namespace

NULL_GPU_API int cuDeviceGetAttribute(int* value, int attribute, int device) {
  State& s = State::get();
  if (device < 0 || device >= s.spec.count) return invalid_device;
  switch (attribute) {
  case 1: *value = 1024; break;       // max threads per block
  case 2: *value = 1024; break;       // max block dim x
  case 5: *value = 2147483647; break; // max grid dim x
  case 8: *value = 49152; break;      // shared memory per block
  case 10: *value = 32; break;        // warp size
  case 16:
    *value = s.spec.multiprocessors;
    break; // multiprocessor count
  // Clocks and bus width that give back the spec's rates as sinter's cost model reads them
  // (80% of SMs x clock x the architecture's tensor FLOPs per clock, 88% of 2 x memory clock x
  // bus width: jit/backend/cuda/cost_model.cpp).
  case 13:
    *value = static_cast<int>(
        s.spec.flops / 0.8 /
        (s.spec.multiprocessors * tensor_flops_per_sm(s.spec.compute_capability)) / 1e3);
    break;
  case 36: *value = static_cast<int>(s.spec.bandwidth / 0.88 / (2.0 * 5120 / 8) / 1e3); break;
  case 37: *value = 5120; break;                           // memory bus width, bits
  case 75: *value = s.spec.compute_capability / 10; break; // major
  case 76: *value = s.spec.compute_capability % 10; break; // minor
  case 97: *value = 232448; break;                         // opt-in shared per block
  default: *value = 0; break;
  }
  return success;
}

NULL_GPU_API int cuDevicePrimaryCtxRetain(void** context, int device) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (!s.initialized) return s.fail(not_initialized, "call cuInit first");
  if (device < 0 || device >= s.spec.count) return s.fail(invalid_device, "no such device");
  auto d = static_cast<std::size_t>(device);
  if (!s.contexts[d]) {
    // Creating a context takes device memory of its own, as on a real GPU.
    s.contexts[d] = std::make_unique<ContextState>(ContextState{device});
    s.device_used[d] += s.spec.reserve;
    s.counters.context_bytes += s.spec.reserve;
  }
  ++s.context_refs[d];
  *context = s.contexts[d].get();
  return success;
}

NULL_GPU_API int cuDevicePrimaryCtxRelease_v2(int device) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (device < 0 || device >= s.spec.count) return invalid_device;
  auto d = static_cast<std::size_t>(device);
  if (s.context_refs[d] > 0) --s.context_refs[d];
  return success;
}

NULL_GPU_API int cuCtxSetCurrent(void* context) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  auto* c = static_cast<ContextState*>(context);
  if (c && std::none_of(s.contexts.begin(), s.contexts.end(),
                        [&](const auto& known) { return known.get() == c; }))
    return s.fail(invalid_context, "cuCtxSetCurrent with a context the driver did not make");
  State::current() = c;
  return success;
}

NULL_GPU_API int cuMemGetInfo_v2(std::size_t* free, std::size_t* total) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (int r = s.need_context()) return r;
  *free = s.device_free(State::current()->device);
  *total = s.spec.memory;
  return success;
}

NULL_GPU_API int cuMemAlloc_v2(DevicePtr* pointer, std::size_t bytes) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (int r = s.need_context()) return r;
  if (int r = refuse_during_capture(s, "cuMemAlloc")) return r;
  if (!pointer || bytes == 0) return s.fail(invalid_value, "cuMemAlloc of 0 bytes");
  int device = State::current()->device;
  // As the driver hands out memory: an allocation of a page (2 MiB) or more in whole pages
  // (2.1 MiB takes 4), smaller ones packed into shared pages at 512 bytes.
  constexpr uint64_t page = uint64_t{2} << 20;
  uint64_t rounded = bytes >= page ? (bytes + page - 1) / page * page : (bytes + 511) / 512 * 512;
  if (rounded > s.device_free(device)) {
    ++s.counters.device_failed_allocations;
    return s.fail(out_of_memory, "cuMemAlloc of " + std::to_string(bytes) + " bytes with " +
                                     std::to_string(s.device_free(device)) + " free");
  }
  // Address space only: nothing may touch it from the host (a host access is a bug: it crashes),
  // unless copies are on, which write it (pages are committed as they are written).
  void* p = mmap(nullptr, rounded, s.copies ? PROT_READ | PROT_WRITE : PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return s.fail(out_of_memory, "the host has no address space left");
  // SINTER_NULL_GPU_FILL=nan: fresh memory holds NaN in every float type, as if each kernel
  // that writes it had made one (the --check-numerics tests).
  if (s.copies && fill_with_nan()) std::memset(p, 0xFF, rounded);
  auto address = reinterpret_cast<uint64_t>(p);
  s.device_memory[address] = Allocation{rounded, device};
  s.device_used[static_cast<std::size_t>(device)] += rounded;
  NullGpuCounters& c = s.counters;
  c.device_bytes += rounded;
  c.device_peak_bytes = std::max(c.device_peak_bytes, c.device_bytes);
  ++c.device_allocations;
  *pointer = address;
  return success;
}

NULL_GPU_API int cuMemFree_v2(DevicePtr pointer) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (int r = refuse_during_capture(s, "cuMemFree")) return r;
  auto it = s.device_memory.find(pointer);
  if (it == s.device_memory.end())
    return s.fail(invalid_value, "cuMemFree of an address cuMemAlloc did not return");
  munmap(reinterpret_cast<void*>(pointer), it->second.bytes);
  s.device_used[static_cast<std::size_t>(it->second.device)] -= it->second.bytes;
  s.counters.device_bytes -= it->second.bytes;
  s.device_memory.erase(it);
  ++s.frees;
  return success;
}

NULL_GPU_API int cuMemAllocHost_v2(void** pointer, std::size_t bytes) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (int r = s.need_context()) return r;
  if (int r = refuse_during_capture(s, "cuMemAllocHost")) return r;
  if (!pointer || bytes == 0) return s.fail(invalid_value, "cuMemAllocHost of 0 bytes");
  // Pinned memory is resident from the start, as the driver locks every page.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (p == MAP_FAILED) return s.fail(out_of_memory, "the host cannot pin " + std::to_string(bytes));
  s.pinned[reinterpret_cast<uintptr_t>(p)] = bytes;
  s.counters.pinned_bytes += bytes;
  s.counters.pinned_peak_bytes = std::max(s.counters.pinned_peak_bytes, s.counters.pinned_bytes);
  *pointer = p;
  return success;
}

NULL_GPU_API int cuMemFreeHost(void* pointer) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (int r = refuse_during_capture(s, "cuMemFreeHost")) return r;
  auto it = s.pinned.find(reinterpret_cast<uintptr_t>(pointer));
  if (it == s.pinned.end())
    return s.fail(invalid_value, "cuMemFreeHost of memory cuMemAllocHost did not return");
  munmap(pointer, it->second);
  s.counters.pinned_bytes -= it->second;
  s.pinned.erase(it);
  return success;
}

namespace {

int copy(State& s, Work::Kind kind, uint64_t device_to, uint64_t device_from, void* host_to,
         const void* host_from, std::size_t bytes, void* stream_handle, const char* call) {
  if (int r = s.need_context()) return r;
  StreamState& stream = s.stream(stream_handle);
  Work w{kind};
  w.bytes = bytes;
  const double host_rate = s.spec.host_bandwidth, device_rate = s.spec.bandwidth;
  auto check_device = [&](uint64_t address, const char* which) -> int {
    if (s.device_range_ok(address, bytes)) return success;
    return s.fail(invalid_value, std::string(call) + ": the " + which + " range of " +
                                     std::to_string(bytes) +
                                     " bytes is not inside one device allocation");
  };
  if (kind == Work::copy_h2d) {
    if (int r = check_device(device_to, "destination")) return r;
    w.pageable = !s.host_is_pinned(host_from);
    w.seconds = static_cast<double>(bytes) / host_rate;
    w.ranges.emplace_back(device_to, bytes);
    w.from = host_from;
    w.to = reinterpret_cast<void*>(device_to);
  } else if (kind == Work::copy_d2h) {
    if (int r = check_device(device_from, "source")) return r;
    w.pageable = !s.host_is_pinned(host_to);
    w.seconds = static_cast<double>(bytes) / host_rate;
    w.ranges.emplace_back(device_from, bytes);
    w.to = host_to;
    w.from = reinterpret_cast<const void*>(device_from);
  } else {
    if (int r = check_device(device_to, "destination")) return r;
    if (int r = check_device(device_from, "source")) return r;
    w.seconds = 2.0 * static_cast<double>(bytes) / device_rate;
    w.ranges.emplace_back(device_to, bytes);
    w.ranges.emplace_back(device_from, bytes);
    w.to = reinterpret_cast<void*>(device_to);
    w.from = reinterpret_cast<const void*>(device_from);
  }
  if (stream.capturing && w.pageable)
    return s.fail(capture_unsupported,
                  std::string(call) + " from pageable host memory cannot be captured");
  s.enqueue(stream, std::move(w));
  return success;
}

} // namespace

NULL_GPU_API int cuMemcpyDtoH_v2(void* to, DevicePtr from, std::size_t bytes) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (int r = refuse_during_capture(s, "cuMemcpyDtoH")) return r;
  ++s.counters.host_syncs;
  return copy(s, Work::copy_d2h, 0, from, to, nullptr, bytes, nullptr, "cuMemcpyDtoH");
}

NULL_GPU_API int cuMemcpyHtoDAsync_v2(DevicePtr to, const void* from, std::size_t bytes,
                                      void* stream) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  return copy(s, Work::copy_h2d, to, 0, nullptr, from, bytes, stream, "cuMemcpyHtoDAsync");
}

NULL_GPU_API int cuMemcpyDtoHAsync_v2(void* to, DevicePtr from, std::size_t bytes, void* stream) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  return copy(s, Work::copy_d2h, 0, from, to, nullptr, bytes, stream, "cuMemcpyDtoHAsync");
}

NULL_GPU_API int cuMemcpyDtoDAsync_v2(DevicePtr to, DevicePtr from, std::size_t bytes,
                                      void* stream) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  return copy(s, Work::copy_d2d, to, from, nullptr, nullptr, bytes, stream, "cuMemcpyDtoDAsync");
}

NULL_GPU_API int cuMemsetD8Async(DevicePtr to, unsigned char value, std::size_t bytes,
                                 void* stream) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (int r = s.need_context()) return r;
  if (!s.device_range_ok(to, bytes))
    return s.fail(invalid_value, "cuMemsetD8Async: the range of " + std::to_string(bytes) +
                                     " bytes is not inside one device allocation");
  Work w{Work::memset};
  w.bytes = bytes;
  w.seconds = std::max(s.spec.launch_seconds, static_cast<double>(bytes) / s.spec.bandwidth);
  w.ranges.emplace_back(to, bytes);
  w.to = reinterpret_cast<void*>(to);
  w.value = value;
  s.enqueue(s.stream(stream), std::move(w));
  return success;
}

NULL_GPU_API int cuStreamCreate(void** stream, unsigned) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (int r = s.need_context()) return r;
  *stream = new StreamState();
  return success;
}

NULL_GPU_API int cuStreamDestroy_v2(void* stream) {
  if (!stream) return invalid_handle;
  delete static_cast<StreamState*>(stream);
  return success;
}

NULL_GPU_API int cuStreamSynchronize(void* stream) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (s.stream(stream).capturing)
    return s.fail(capture_unsupported, "cuStreamSynchronize on a stream being captured");
  if (int r = refuse_during_capture(s, "cuStreamSynchronize")) return r;
  ++s.counters.host_syncs;
  return success;
}

NULL_GPU_API int cuStreamWaitEvent(void* stream, void* event, unsigned) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (!event) return s.fail(invalid_handle, "cuStreamWaitEvent on a null event");
  StreamState& st = s.stream(stream);
  auto* e = static_cast<EventState*>(event);
  if (!st.capturing && e->recorded) st.clock = std::max(st.clock, e->time);
  return success;
}

NULL_GPU_API int cuEventCreate(void** event, unsigned) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (int r = s.need_context()) return r;
  *event = new EventState();
  return success;
}

NULL_GPU_API int cuEventDestroy_v2(void* event) {
  if (!event) return invalid_handle;
  delete static_cast<EventState*>(event);
  return success;
}

NULL_GPU_API int cuEventRecord(void* event, void* stream) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (!event) return s.fail(invalid_handle, "cuEventRecord of a null event");
  Work w{Work::event};
  w.record = static_cast<EventState*>(event);
  s.enqueue(s.stream(stream), std::move(w));
  return success;
}

NULL_GPU_API int cuEventSynchronize(void* event) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (!event) return s.fail(invalid_handle, "cuEventSynchronize of a null event");
  if (int r = refuse_during_capture(s, "cuEventSynchronize")) return r;
  ++s.counters.host_syncs;
  return success;
}

NULL_GPU_API int cuEventElapsedTime_v2(float* ms, void* from, void* to) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  auto *a = static_cast<EventState*>(from), *b = static_cast<EventState*>(to);
  if (!a || !b || !ms) return s.fail(invalid_handle, "cuEventElapsedTime of a null event");
  if (!a->recorded || !b->recorded)
    return s.fail(invalid_handle, "cuEventElapsedTime of an event never recorded");
  *ms = static_cast<float>((b->time - a->time) * 1e3);
  return success;
}

NULL_GPU_API int cuEventElapsedTime(float* ms, void* from, void* to) {
  return cuEventElapsedTime_v2(ms, from, to);
}

NULL_GPU_API int cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                unsigned by, unsigned bz, unsigned shared, void* stream,
                                void** parameters, void** extra) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (int r = s.need_context()) return r;
  auto* f = static_cast<FunctionState*>(function);
  if (!f) return s.fail(invalid_handle, "cuLaunchKernel of a null function");
  const KernelSignature& k = *f->signature;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0)
    return s.fail(invalid_value, "cuLaunchKernel of " + k.name + " with an empty grid or block");
  if (uint64_t{bx} * by * bz > 1024 || gy > 65535 || gz > 65535 || gx > 2147483647u)
    return s.fail(invalid_value, "cuLaunchKernel of " + k.name + ": block " + std::to_string(bx) +
                                     "x" + std::to_string(by) + "x" + std::to_string(bz) +
                                     " or grid beyond the device's limits");
  if (shared > 232448)
    return s.fail(launch_out_of_resources, "cuLaunchKernel of " + k.name + " with " +
                                               std::to_string(shared) +
                                               " bytes of dynamic shared memory");
  if (shared > static_cast<unsigned>(f->max_dynamic_shared))
    return s.fail(invalid_value, "cuLaunchKernel of " + k.name + " with " + std::to_string(shared) +
                                     " bytes of dynamic shared memory, more than the function "
                                     "asked for (cuFuncSetAttribute: " +
                                     std::to_string(f->max_dynamic_shared) + ")");
  if (extra) return s.fail(invalid_value, "cuLaunchKernel: the null driver takes no `extra`");
  if (!k.parameters.empty() && !parameters)
    return s.fail(invalid_value, "cuLaunchKernel of " + k.name + " without its parameters");
  Work w{Work::kernel};
  w.seconds = s.spec.launch_seconds;
  for (std::size_t i = 0; i < k.parameters.size(); ++i) {
    if (!parameters[i])
      return s.fail(invalid_value, "cuLaunchKernel of " + k.name + ": parameter " +
                                       std::to_string(i) + " is null");
    if (!k.parameters[i].second) continue;
    uint64_t address = 0;
    std::memcpy(&address, parameters[i], sizeof address);
    if (!s.device_range_ok(address, 0))
      return s.fail(illegal_address, "cuLaunchKernel of " + k.name + ": parameter " +
                                         std::to_string(i) +
                                         " points outside every live device allocation");
    w.ranges.emplace_back(address, 0);
  }
  if (s.copies && k.name == "sinter_first_non_finite") w.emulate = emulated_scan(parameters);
  s.enqueue(s.stream(stream), std::move(w));
  return success;
}

NULL_GPU_API int cuFuncSetAttribute(void* function, int attribute, int value) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  auto* f = static_cast<FunctionState*>(function);
  if (!f) return s.fail(invalid_handle, "cuFuncSetAttribute of a null function");
  switch (attribute) {
  case 8: // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: an H100 gives a block 227 KB
    if (value < 0 || value > 232448)
      return s.fail(invalid_value, "cuFuncSetAttribute: " + std::to_string(value) +
                                       " bytes of dynamic shared memory for " + f->signature->name +
                                       " (at most 232448)");
    f->max_dynamic_shared = value;
    return success;
  case 9: // CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: a percentage, or -1
    if (value < -1 || value > 100)
      return s.fail(invalid_value, "cuFuncSetAttribute: a shared memory carveout of " +
                                       std::to_string(value) + "%");
    return success;
  default:
    return s.fail(invalid_value, "cuFuncSetAttribute: attribute " + std::to_string(attribute) +
                                     " is not one the null driver takes");
  }
}

NULL_GPU_API int cuStreamBeginCapture_v2(void* stream, int mode) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (!stream) return s.fail(capture_unsupported, "the legacy default stream cannot be captured");
  StreamState& st = s.stream(stream);
  if (st.capturing) return s.fail(invalid_value, "the stream is being captured already");
  st.capturing = std::make_unique<GraphState>();
  st.capture_mode = mode;
  st.capture_broken = false;
  st.capture_error.clear();
  if (mode != 2) capturing_here.push_back(&st); // global or thread-local: this thread is bound
  return success;
}

NULL_GPU_API int cuStreamEndCapture(void* stream, void** graph) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  StreamState& st = s.stream(stream);
  if (!st.capturing) return s.fail(invalid_value, "cuStreamEndCapture on a stream not capturing");
  std::erase(capturing_here, &st);
  std::unique_ptr<GraphState> g = std::move(st.capturing);
  if (st.capture_broken) {
    *graph = nullptr;
    return s.fail(capture_invalidated, "the capture was invalidated: " + st.capture_error);
  }
  *graph = g.release();
  return success;
}

NULL_GPU_API int cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (!graph) return s.fail(invalid_value, "cuGraphInstantiateWithFlags of a null graph");
  auto e = std::make_unique<GraphExecState>();
  e->graph = *static_cast<GraphState*>(graph);
  e->frees_at_instantiate = s.frees;
  *exec = e.release();
  return success;
}

NULL_GPU_API int cuGraphLaunch(void* exec, void* stream) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  auto* e = static_cast<GraphExecState*>(exec);
  if (!e) return s.fail(invalid_handle, "cuGraphLaunch of a null graph");
  StreamState& st = s.stream(stream);
  if (st.capturing) return s.fail(capture_unsupported, "the null driver nests no graphs");
  if (e->frees_at_instantiate != s.frees) { // memory was freed since: is all of it still there?
    for (const Work& w : e->graph.nodes)
      for (auto [address, bytes] : w.ranges)
        if (!s.device_range_ok(address, bytes))
          return s.fail(illegal_address, "cuGraphLaunch: a node of the graph uses device memory "
                                         "freed after the graph was captured");
    e->frees_at_instantiate = s.frees;
  }
  uint64_t nodes = 0;
  for (const Work& w : e->graph.nodes) {
    st.clock += w.seconds;
    s.perform(w);
    nodes += w.kind == Work::event ? 0 : 1;
  }
  ++s.counters.graph_launches;
  s.counters.graph_nodes_launched += nodes;
  s.counters.last_graph_nodes = nodes;
  return success;
}

NULL_GPU_API int cuGraphExecDestroy(void* exec) {
  delete static_cast<GraphExecState*>(exec);
  return success;
}

NULL_GPU_API int cuGraphDestroy(void* graph) {
  delete static_cast<GraphState*>(graph);
  return success;
}
