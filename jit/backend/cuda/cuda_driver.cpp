// jit/backend/cuda/cuda_driver.cpp — dlopen("libcuda.so.1"), symbol resolution, errors, device list
#include "jit/backend/cuda/cuda_driver.hpp"
#include "jit/runtime/memory_plan.hpp"
#include "jit/settings.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string_view>

namespace sinter::cuda {
namespace {

struct Loaded {
  Driver driver;
  bool ok = false;
  bool no_gpu = false; ///< nothing to use (no driver library, or no device), not a broken one
  std::string reason;
};

/// Resolves the first of `names` the library exports (newest ABI first).
template <class F> bool resolve(void* library, F& slot, std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (void* symbol = dlsym(library, name)) {
      slot = reinterpret_cast<F>(symbol);
      return true;
    }
  return false;
}

Loaded load() {
  Loaded loaded;
  std::optional<std::string> null_library;
  try {
    null_library = null_gpu_library();
  } catch (const std::exception& e) {
    loaded.reason = e.what();
    return loaded;
  }
  const char* explicit_path = null_library ? null_library->c_str() : setting("SINTER_LIBCUDA");
  const char* path = explicit_path ? explicit_path : "libcuda.so.1";
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    loaded.no_gpu = !explicit_path; // a path the user named that fails to load is an error
    const char* why = dlerror();
    loaded.reason = std::string("cannot load ") + path + " (" + (why ? why : "not found") +
                    "); install the NVIDIA driver, or set SINTER_LIBCUDA to libcuda.so.1";
    return loaded;
  }
  Driver& d = loaded.driver;
  std::string missing;
  auto need = [&](auto& slot, std::initializer_list<const char*> names) {
    if (!resolve(library, slot, names))
      missing += std::string(missing.empty() ? "" : ", ") + *names.begin();
  };
  need(d.cuInit, {"cuInit"});
  need(d.cuDriverGetVersion, {"cuDriverGetVersion"});
  need(d.cuGetErrorName, {"cuGetErrorName"});
  need(d.cuGetErrorString, {"cuGetErrorString"});
  need(d.cuDeviceGetCount, {"cuDeviceGetCount"});
  need(d.cuDeviceGet, {"cuDeviceGet"});
  need(d.cuDeviceGetName, {"cuDeviceGetName"});
  need(d.cuDeviceTotalMem, {"cuDeviceTotalMem_v2"});
  need(d.cuDeviceGetAttribute, {"cuDeviceGetAttribute"});
  need(d.cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"});
  need(d.cuDevicePrimaryCtxRelease, {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"});
  need(d.cuCtxSetCurrent, {"cuCtxSetCurrent"});
  need(d.cuMemGetInfo, {"cuMemGetInfo_v2"});
  need(d.cuMemAlloc, {"cuMemAlloc_v2"});
  need(d.cuMemFree, {"cuMemFree_v2"});
  need(d.cuMemAllocHost, {"cuMemAllocHost_v2"});
  need(d.cuMemFreeHost, {"cuMemFreeHost"});
  need(d.cuMemcpyDtoH, {"cuMemcpyDtoH_v2"});
  need(d.cuMemcpyHtoDAsync, {"cuMemcpyHtoDAsync_v2"});
  need(d.cuMemcpyDtoHAsync, {"cuMemcpyDtoHAsync_v2"});
  need(d.cuMemcpyDtoDAsync, {"cuMemcpyDtoDAsync_v2"});
  need(d.cuMemsetD8Async, {"cuMemsetD8Async"});
  need(d.cuStreamCreate, {"cuStreamCreate"});
  need(d.cuStreamDestroy, {"cuStreamDestroy_v2"});
  need(d.cuStreamSynchronize, {"cuStreamSynchronize"});
  need(d.cuStreamWaitEvent, {"cuStreamWaitEvent"});
  need(d.cuEventCreate, {"cuEventCreate"});
  need(d.cuEventDestroy, {"cuEventDestroy_v2"});
  need(d.cuEventRecord, {"cuEventRecord"});
  need(d.cuEventSynchronize, {"cuEventSynchronize"});
  need(d.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
  need(d.cuModuleLoadDataEx, {"cuModuleLoadDataEx"});
  need(d.cuModuleUnload, {"cuModuleUnload"});
  need(d.cuModuleGetFunction, {"cuModuleGetFunction"});
  need(d.cuLaunchKernel, {"cuLaunchKernel"});
  need(d.cuFuncSetAttribute, {"cuFuncSetAttribute"});
  need(d.cuLinkCreate, {"cuLinkCreate_v2"});
  need(d.cuLinkAddData, {"cuLinkAddData_v2"});
  need(d.cuLinkComplete, {"cuLinkComplete"});
  need(d.cuLinkDestroy, {"cuLinkDestroy"});
  need(d.cuStreamBeginCapture, {"cuStreamBeginCapture_v2"});
  need(d.cuStreamEndCapture, {"cuStreamEndCapture"});
  need(d.cuGraphInstantiateWithFlags, {"cuGraphInstantiateWithFlags"});
  need(d.cuGraphLaunch, {"cuGraphLaunch"});
  need(d.cuGraphExecDestroy, {"cuGraphExecDestroy"});
  need(d.cuGraphDestroy, {"cuGraphDestroy"});
  if (!missing.empty()) {
    loaded.reason = std::string(path) + " is too old for sinter (missing " + missing +
                    "); install an NVIDIA driver for CUDA 12 or newer";
    return loaded;
  }
  if (Result r = d.cuInit(0); r != 0) {
    constexpr Result no_device = 100; // CUDA_ERROR_NO_DEVICE
    loaded.no_gpu = r == no_device;
    const char *name = nullptr, *text = nullptr;
    d.cuGetErrorName(r, &name);
    d.cuGetErrorString(r, &text);
    loaded.reason =
        std::string(null_library ? "the null CUDA driver's cuInit failed with "
                                 : "the CUDA driver is installed but cuInit failed with ") +
        (name ? name : std::to_string(r)) + (text ? std::string(" (") + text + ")" : "") +
        (null_library ? ""
                      : " (no GPU visible? check nvidia-smi and "
                        "CUDA_VISIBLE_DEVICES)");
    return loaded;
  }
  if (null_library) {
    const char* (*describe)() = nullptr;
    if (!resolve(library, describe, {"sinterNullGpuDescribe"})) {
      loaded.reason = *null_library + " is not sinter's null driver (no sinterNullGpuDescribe)";
      return loaded;
    }
    d.null_description = describe();
  }
  loaded.ok = true;
  return loaded; // the library stays loaded for the life of the process
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

} // namespace

std::optional<std::string> null_gpu_library() {
  namespace fs = std::filesystem;
  const char* value = setting("SINTER_NULL_GPU");
  if (!value || !*value || std::string_view(value) == "0") return std::nullopt;
  constexpr const char* file = "libsinter_null_gpu.so";
  if (std::string_view(value).find('/') != std::string_view::npos) {
    if (!fs::is_regular_file(value))
      throw std::invalid_argument(std::string("sinter: SINTER_NULL_GPU=") + value +
                                  " is not a file; point it at " + file + ", or set it to 1");
    return std::string(value);
  }
  if (std::string_view(value) != "1")
    throw std::invalid_argument(std::string("sinter: SINTER_NULL_GPU='") + value +
                                "' — use 1 (the null driver beside libsinter), 0, or the path of " +
                                file);
  // Installed beside libsinter; in a build tree, where tests/support/null_cuda builds it.
  std::vector<fs::path> candidates;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&null_gpu_library), &info) && info.dli_fname) {
    fs::path here = fs::path(info.dli_fname).parent_path();
    candidates = {here / file, here / "tests/support/null_cuda" / file,
                  here / "../tests/support/null_cuda" / file};
  }
  for (const fs::path& p : candidates)
    if (std::error_code ec; fs::is_regular_file(p, ec)) return p.lexically_normal().string();
  std::string looked;
  for (const fs::path& p : candidates)
    looked += (looked.empty() ? "" : ", ") + p.lexically_normal().string();
  throw std::invalid_argument(std::string("sinter: SINTER_NULL_GPU=1 but ") + file +
                              " is not beside libsinter (looked for " + looked +
                              "); build it (ninja -C build) or set SINTER_NULL_GPU to its path");
}

void* open_cuda_library(const std::vector<std::string>& names) {
  if (std::optional<std::string> null_library = null_gpu_library())
    return dlopen(null_library->c_str(), RTLD_NOW | RTLD_LOCAL);
  for (const std::string& name : names)
    if (void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  return nullptr;
}

const Driver* driver() { return loaded().ok ? &loaded().driver : nullptr; }
const std::string& unavailable_reason() { return loaded().reason; }
bool no_gpu_present() { return !loaded().ok && loaded().no_gpu; }

const Driver& require_driver() {
  if (const Driver* d = driver()) return *d;
  throw std::runtime_error("sinter: cannot use CUDA: " + unavailable_reason() +
                           "; or run on the CPU with --device cpu");
}

void Driver::check(Result result, const char* call) const {
  if (result == 0) return;
  const char* name = nullptr;
  const char* text = nullptr;
  cuGetErrorName(result, &name);
  cuGetErrorString(result, &text);
  std::string message = std::string("sinter: CUDA ") + call +
                        " failed: " + (name ? name : "error " + std::to_string(result)) + " (" +
                        (text ? text : "no description") + ")";
  if (result == 2) { // CUDA_ERROR_OUT_OF_MEMORY: a training step explains it (plan, batch)
    std::size_t free = 0, total = 0;
    if (cuMemGetInfo && cuMemGetInfo(&free, &total) != 0) free = 0;
    throw sinter::OutOfMemory(message + "; the GPU is out of memory (" +
                                  sinter::format_bytes(static_cast<int64_t>(free)) +
                                  " free): use a smaller batch or model",
                              0, static_cast<int64_t>(free));
  }
  throw std::runtime_error(message);
}

int Driver::version() const {
  int v = 0;
  check(cuDriverGetVersion(&v), "cuDriverGetVersion");
  return v;
}

std::vector<DeviceInfo> Driver::devices() const {
  int count = 0;
  check(cuDeviceGetCount(&count), "cuDeviceGetCount");
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    int device = 0;
    check(cuDeviceGet(&device, i), "cuDeviceGet");
    DeviceInfo info;
    info.ordinal = i;
    char name[256] = {};
    check(cuDeviceGetName(name, sizeof name, device), "cuDeviceGetName");
    info.name = name;
    if (is_null()) info.name += " [null driver]";
    check(cuDeviceTotalMem(&info.total_memory, device), "cuDeviceTotalMem");
    int major = 0, minor = 0;
    check(cuDeviceGetAttribute(&major, attribute_compute_capability_major, device),
          "cuDeviceGetAttribute");
    check(cuDeviceGetAttribute(&minor, attribute_compute_capability_minor, device),
          "cuDeviceGetAttribute");
    info.compute_capability = major * 10 + minor;
    check(cuDeviceGetAttribute(&info.multiprocessors, attribute_multiprocessor_count, device),
          "cuDeviceGetAttribute");
    check(cuDeviceGetAttribute(&info.clock_khz, attribute_clock_rate, device),
          "cuDeviceGetAttribute");
    check(cuDeviceGetAttribute(&info.memory_clock_khz, attribute_memory_clock_rate, device),
          "cuDeviceGetAttribute");
    check(cuDeviceGetAttribute(&info.memory_bus_bits, attribute_global_memory_bus_width, device),
          "cuDeviceGetAttribute");
    out.push_back(info);
  }
  return out;
}

StreamTimer::StreamTimer(const Driver& driver, StreamHandle stream) : d_(driver), stream_(stream) {
  d_.check(d_.cuEventCreate(&start_, 0), "cuEventCreate");
  try {
    d_.check(d_.cuEventCreate(&stop_, 0), "cuEventCreate");
  } catch (...) {
    d_.cuEventDestroy(start_);
    throw;
  }
}

StreamTimer::~StreamTimer() {
  d_.cuEventDestroy(start_);
  d_.cuEventDestroy(stop_);
}

double StreamTimer::milliseconds(const std::function<void()>& enqueue) {
  d_.check(d_.cuEventRecord(start_, stream_), "cuEventRecord");
  enqueue();
  d_.check(d_.cuEventRecord(stop_, stream_), "cuEventRecord");
  d_.check(d_.cuEventSynchronize(stop_), "cuEventSynchronize");
  float ms = 0;
  d_.check(d_.cuEventElapsedTime(&ms, start_, stop_), "cuEventElapsedTime");
  return static_cast<double>(ms);
}

} // namespace sinter::cuda
