// jit/backend/cuda/cuda_driver.hpp — the CUDA Driver API, loaded with dlopen so nothing links
// libcuda
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sinter::cuda {

// The driver's handle types, declared here with the ABI of cuda.h (CUDA 12/13) so that sinter
// builds without the toolkit's headers.
using Result = int; // CUresult; 0 is CUDA_SUCCESS
using DevicePtr = unsigned long long;
using ContextHandle = struct CUctx_st*;
using ModuleHandle = struct CUmod_st*;
using FunctionHandle = struct CUfunc_st*;
using StreamHandle = struct CUstream_st*;
using EventHandle = struct CUevent_st*;
using GraphHandle = struct CUgraph_st*;
using GraphExecHandle = struct CUgraphExec_st*;
using LinkHandle = struct CUlinkState_st*;

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int compute_capability = 0; ///< major * 10 + minor
  std::size_t total_memory = 0;
  int multiprocessors = 0;
  int clock_khz = 0;        ///< the SMs' peak clock
  int memory_clock_khz = 0; ///< the memory's peak clock
  int memory_bus_bits = 0;  ///< the memory bus width
};

/// The entry points sinter uses, resolved from libcuda.so.1 (versioned names such as
/// cuMemAlloc_v2, as cuda.h maps them).
struct Driver {
  Result (*cuInit)(unsigned) = nullptr;
  Result (*cuDriverGetVersion)(int*) = nullptr;
  Result (*cuGetErrorName)(Result, const char**) = nullptr;
  Result (*cuGetErrorString)(Result, const char**) = nullptr;
  Result (*cuDeviceGetCount)(int*) = nullptr;
  Result (*cuDeviceGet)(int*, int) = nullptr;
  Result (*cuDeviceGetName)(char*, int, int) = nullptr;
  Result (*cuDeviceTotalMem)(std::size_t*, int) = nullptr;
  Result (*cuDeviceGetAttribute)(int*, int, int) = nullptr;
  Result (*cuDevicePrimaryCtxRetain)(ContextHandle*, int) = nullptr;
  Result (*cuDevicePrimaryCtxRelease)(int) = nullptr;
  Result (*cuCtxSetCurrent)(ContextHandle) = nullptr;
  Result (*cuMemGetInfo)(std::size_t*, std::size_t*) = nullptr;
  Result (*cuMemAlloc)(DevicePtr*, std::size_t) = nullptr;
  Result (*cuMemFree)(DevicePtr) = nullptr;
  Result (*cuMemAllocHost)(void**, std::size_t) = nullptr;
  Result (*cuMemFreeHost)(void*) = nullptr;
  Result (*cuMemcpyDtoH)(void*, DevicePtr, std::size_t) = nullptr;
  Result (*cuMemcpyHtoDAsync)(DevicePtr, const void*, std::size_t, StreamHandle) = nullptr;
  Result (*cuMemcpyDtoHAsync)(void*, DevicePtr, std::size_t, StreamHandle) = nullptr;
  Result (*cuMemcpyDtoDAsync)(DevicePtr, DevicePtr, std::size_t, StreamHandle) = nullptr;
  Result (*cuMemsetD8Async)(DevicePtr, unsigned char, std::size_t, StreamHandle) = nullptr;
  Result (*cuStreamCreate)(StreamHandle*, unsigned) = nullptr;
  Result (*cuStreamDestroy)(StreamHandle) = nullptr;
  Result (*cuStreamSynchronize)(StreamHandle) = nullptr;
  Result (*cuStreamWaitEvent)(StreamHandle, EventHandle, unsigned) = nullptr;
  Result (*cuEventCreate)(EventHandle*, unsigned) = nullptr;
  Result (*cuEventDestroy)(EventHandle) = nullptr;
  Result (*cuEventRecord)(EventHandle, StreamHandle) = nullptr;
  Result (*cuEventSynchronize)(EventHandle) = nullptr;
  Result (*cuEventElapsedTime)(float*, EventHandle, EventHandle) = nullptr;
  Result (*cuModuleLoadDataEx)(ModuleHandle*, const void*, unsigned, int*, void**) = nullptr;
  Result (*cuModuleUnload)(ModuleHandle) = nullptr;
  Result (*cuModuleGetFunction)(FunctionHandle*, ModuleHandle, const char*) = nullptr;
  Result (*cuLaunchKernel)(FunctionHandle, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, StreamHandle, void**, void**) = nullptr;
  Result (*cuFuncSetAttribute)(FunctionHandle, int, int) = nullptr;
  Result (*cuLinkCreate)(unsigned, int*, void**, LinkHandle*) = nullptr;
  Result (*cuLinkAddData)(LinkHandle, int, void*, std::size_t, const char*, unsigned, int*,
                          void**) = nullptr;
  Result (*cuLinkComplete)(LinkHandle, void**, std::size_t*) = nullptr;
  Result (*cuLinkDestroy)(LinkHandle) = nullptr;
  Result (*cuStreamBeginCapture)(StreamHandle, int) = nullptr;
  Result (*cuStreamEndCapture)(StreamHandle, GraphHandle*) = nullptr;
  Result (*cuGraphInstantiateWithFlags)(GraphExecHandle*, GraphHandle,
                                        unsigned long long) = nullptr;
  Result (*cuGraphLaunch)(GraphExecHandle, StreamHandle) = nullptr;
  Result (*cuGraphExecDestroy)(GraphExecHandle) = nullptr;
  Result (*cuGraphDestroy)(GraphHandle) = nullptr;

  /// Set when this is the null driver (SINTER_NULL_GPU=1): its one-line description of the
  /// device it pretends to be; empty for a real driver.
  std::string null_description;
  bool is_null() const { return !null_description.empty(); }

  /// Throws std::runtime_error naming the call, the error and what to check, unless ok.
  void check(Result result, const char* call) const;
  /// The driver's version as 1000 * major + 10 * minor (13000 for CUDA 13.0).
  int version() const;
  std::vector<DeviceInfo> devices() const;
};

/// The loaded driver, or nullptr (with the reason in unavailable_reason()): no libcuda.so.1,
/// a symbol missing, or cuInit failing (no GPU, driver/kernel mismatch). Loaded once.
const Driver* driver();
const std::string& unavailable_reason();
/// True when the machine has no GPU to use (no libcuda.so.1, or cuInit reports no device);
/// false when a driver is present but broken (too old, failing cuInit) or when it works.
bool no_gpu_present();

/// The null driver's library (tests/support/null_cuda, docs/gpu.md) when SINTER_NULL_GPU asks
/// for it, which then stands in for libcuda, libcublasLt and libnccl; nullopt when the variable
/// is unset or 0. Throws std::invalid_argument for a bad value or a library not found.
std::optional<std::string> null_gpu_library();
/// A CUDA library sinter loads with dlopen (cuBLASLt, NCCL): the null driver when
/// SINTER_NULL_GPU asks for it, else the first of `names` that opens; null when none does.
void* open_cuda_library(const std::vector<std::string>& names);

/// The driver, or std::runtime_error that says why CUDA cannot be used and how to fix it.
const Driver& require_driver();

/// Times work enqueued on a stream between two CUDA events (made here, destroyed with it).
class StreamTimer {
public:
  StreamTimer(const Driver& driver, StreamHandle stream);
  ~StreamTimer();
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;
  /// Milliseconds between the events around what `enqueue` puts on the stream (waits for it).
  double milliseconds(const std::function<void()>& enqueue);

private:
  const Driver& d_;
  StreamHandle stream_;
  EventHandle start_ = nullptr, stop_ = nullptr;
};

// Constants of cuda.h that sinter passes.
inline constexpr int attribute_multiprocessor_count = 16;
inline constexpr int attribute_clock_rate = 13;
inline constexpr int attribute_memory_clock_rate = 36;
inline constexpr int attribute_global_memory_bus_width = 37;
inline constexpr int attribute_compute_capability_major = 75;
inline constexpr int attribute_compute_capability_minor = 76;
inline constexpr int jit_info_log_buffer = 3;
inline constexpr int jit_info_log_buffer_size = 4;
inline constexpr int jit_error_log_buffer = 5;
inline constexpr int jit_error_log_buffer_size = 6;
inline constexpr int jit_input_ptx = 1;
inline constexpr int stream_non_blocking = 1;
inline constexpr int stream_capture_thread_local = 1;
inline constexpr int function_max_dynamic_shared_bytes = 8;
inline constexpr int function_preferred_shared_carveout = 9;
inline constexpr int shared_carveout_max_shared = 100;
/// Dynamic shared memory a block may take without asking (cuFuncSetAttribute) first.
inline constexpr int64_t default_dynamic_shared_bytes = 48 * 1024;

} // namespace sinter::cuda
