// jit/backend/cuda/cuda_device.cpp — contexts, buffers, and the memory → disk → LLVM kernel lookup
#include "jit/backend/cuda/cuda_device.hpp"

#include "jit/backend/cpu/thread_pool.hpp"
#include "jit/runtime/memory_plan.hpp"
#include "jit/settings.hpp"

#include "kernels/cuda/cublaslt_gemm.hpp"
#include "kernels/cuda/nvjitlink.hpp"
#include <algorithm>

#include <array>
#include <atomic>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace sinter {

namespace {
// What every live DeviceBuffer holds, and how many there are: an out-of-memory message names
// them beside the driver's own share.
std::atomic<int64_t> device_buffer_bytes{0};
std::atomic<int64_t> device_buffer_count{0};
// Free memory once the first device's context and streams were made (-1: not yet).
std::atomic<int64_t> free_after_context{-1};

// "the GPU is out of memory (...)" for a cuMemAlloc of `bytes` that failed: what is free, what
// sinter's buffers hold, and what the driver took on its own since the context was made.
[[noreturn]] void throw_device_out_of_memory(const cuda::Driver& d, std::size_t bytes) {
  std::size_t free = 0, total = 0;
  if (d.cuMemGetInfo(&free, &total) != 0) free = 0;
  const int64_t held = device_buffer_bytes.load(), at_start = free_after_context.load();
  std::string account = format_bytes(static_cast<int64_t>(free)) + " free; sinter's device " +
                        "buffers hold " + format_bytes(held) + " in " +
                        std::to_string(device_buffer_count.load()) + " allocations";
  if (at_start >= 0)
    account += ", and the driver and libraries took " +
               format_bytes(std::max<int64_t>(0, at_start - static_cast<int64_t>(free) - held)) +
               " of the " + format_bytes(at_start) + " free after the context was made";
  throw OutOfMemory("sinter: CUDA cuMemAlloc of " + format_bytes(static_cast<int64_t>(bytes)) +
                        " failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory); the GPU is out of "
                        "memory (" +
                        account + "): use a smaller batch or model",
                    0, static_cast<int64_t>(free));
}
} // namespace

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cuda::Driver& d = cuda::require_driver();
  cuda::Result result = d.cuMemAlloc(&ptr_, bytes);
  if (result == 2) throw_device_out_of_memory(d, bytes); // CUDA_ERROR_OUT_OF_MEMORY
  d.check(result, "cuMemAlloc");
  device_buffer_bytes += static_cast<int64_t>(bytes);
  ++device_buffer_count;
}
DeviceBuffer::~DeviceBuffer() {
  if (!ptr_) return;
  cuda::driver()->cuMemFree(ptr_);
  device_buffer_bytes -= static_cast<int64_t>(bytes_);
  --device_buffer_count;
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  std::swap(ptr_, other.ptr_);
  std::swap(bytes_, other.bytes_);
  return *this;
}

PackedLayout pack_buffers(std::span<const std::size_t> bytes) {
  PackedLayout layout;
  layout.offsets.reserve(bytes.size());
  for (std::size_t n : bytes) {
    layout.offsets.push_back(layout.total);
    layout.total += (std::max<std::size_t>(n, 16) + 255) / 256 * 256;
  }
  return layout;
}

std::vector<DeviceSpan> allocate_packed(std::span<const std::size_t> bytes) {
  PackedLayout layout = pack_buffers(bytes);
  auto allocation = std::make_shared<const DeviceBuffer>(layout.total);
  std::vector<DeviceSpan> spans;
  spans.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i)
    spans.push_back({allocation, allocation->get() + layout.offsets[i], bytes[i]});
  return spans;
}

PinnedBuffer::PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cuda::Driver& d = cuda::require_driver();
  void* p = nullptr;
  d.check(d.cuMemAllocHost(&p, bytes), "cuMemAllocHost");
  data_ = static_cast<std::byte*>(p);
}
PinnedBuffer::~PinnedBuffer() {
  if (data_) cuda::driver()->cuMemFreeHost(data_);
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  return *this;
}

CudaDevice& CudaDevice::get(int ordinal) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<CudaDevice>> devices;
  std::lock_guard lock(mutex);
  const cuda::Driver& d = cuda::require_driver();
  if (devices.empty()) {
    int count = 0;
    d.check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
    devices.resize(static_cast<std::size_t>(count));
  }
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= devices.size())
    throw std::runtime_error("sinter: there is no GPU cuda:" + std::to_string(ordinal) + "; " +
                             std::to_string(devices.size()) +
                             " visible (see `sinter info`, CUDA_VISIBLE_DEVICES)");
  auto& slot = devices[static_cast<std::size_t>(ordinal)];
  if (!slot) slot.reset(new CudaDevice(d, ordinal));
  return *slot;
}

CudaDevice::CudaDevice(const cuda::Driver& driver, int ordinal) : driver_(driver) {
  info_ = driver.devices().at(static_cast<std::size_t>(ordinal));
  driver.check(driver.cuDeviceGet(&handle_, ordinal), "cuDeviceGet");
  driver.check(driver.cuDevicePrimaryCtxRetain(&context_, handle_), "cuDevicePrimaryCtxRetain");
  make_current();
  driver.check(driver.cuStreamCreate(&stream_, cuda::stream_non_blocking), "cuStreamCreate");
  driver.check(driver.cuStreamCreate(&copy_stream_, cuda::stream_non_blocking), "cuStreamCreate");
  // The first device's; with a second one the driver's share can no longer be told apart.
  std::size_t free = 0, total = 0;
  if (free_after_context.load() == -1 && driver.cuMemGetInfo(&free, &total) == 0)
    free_after_context = static_cast<int64_t>(free) + device_buffer_bytes.load();
  else
    free_after_context = -2;
  // A GPU newer than this LLVM gets PTX for the newest target it knows; the driver compiles
  // that PTX for the GPU (PTX is forward-compatible).
  target_ = std::make_unique<NvptxTarget>(NvptxTarget::best_target_for(info_.compute_capability));
  // The cubin is for this GPU (the driver assembles the PTX for it), whatever the PTX target.
  kernels_ = std::make_unique<KernelLookup<cuda::FunctionHandle>>(
      target_->fingerprint() + ";gpu sm_" + std::to_string(info_.compute_capability) + ";driver " +
      std::to_string(driver.version()) + (driver.is_null() ? ";null driver" : ""));
}

CudaDevice::~CudaDevice() {
  // Devices live until static destruction, when the driver may have shut down already: it has
  // then released the context and everything in it, and nothing here may throw.
  if (!try_make_current()) return;
  for (cuda::ModuleHandle m : modules_)
    driver_.cuModuleUnload(m);
  for (cuda::ModuleHandle m : hand_written_modules_)
    driver_.cuModuleUnload(m);
  workspace_ = DeviceBuffer();
  if (stream_) driver_.cuStreamDestroy(stream_);
  if (copy_stream_) driver_.cuStreamDestroy(copy_stream_);
  if (context_) driver_.cuDevicePrimaryCtxRelease(handle_);
}

bool CudaDevice::try_make_current() const noexcept {
  return driver_.cuCtxSetCurrent(context_) == 0;
}

void CudaDevice::make_current() const {
  driver_.check(driver_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");
}

cuda::DevicePtr CudaDevice::gemm_workspace() {
  std::lock_guard lock(mutex_);
  if (!workspace_.get()) {
    make_current();
    workspace_ = DeviceBuffer(kernels::CublasLt::workspace_bytes);
  }
  return workspace_.get();
}

namespace {

/// libnvJitLink: SINTER_LIBNVJITLINK (which must load), else the loader's path, else the toolkit.
std::optional<kernels::NvJitLink> load_nvjitlink() {
  if (const char* path = setting("SINTER_LIBNVJITLINK"); path && *path) {
    if (auto found = kernels::NvJitLink::load({path})) return found;
    throw std::runtime_error(std::string("sinter: SINTER_LIBNVJITLINK=") + path +
                             " does not load as libnvJitLink (missing, or not a library with "
                             "nvJitLink's entry points): point it at libnvJitLink.so.13 or "
                             ".so.12, or unset it");
  }
  std::vector<std::string> candidates{"libnvJitLink.so.13", "libnvJitLink.so.12"};
  for (std::string& path : kernels::NvJitLink::toolkit_paths())
    candidates.push_back(std::move(path));
  return kernels::NvJitLink::load(candidates);
}

} // namespace

const kernels::NvJitLink* ptx_assembler() {
  const char* choice = setting("SINTER_PTX_ASSEMBLER");
  std::string_view chosen = choice && *choice ? choice : "jitlink";
  if (chosen == "driver") return nullptr;
  if (chosen != "jitlink")
    throw std::invalid_argument("sinter: SINTER_PTX_ASSEMBLER='" + std::string(chosen) +
                                "' — use jitlink (libnvJitLink) or driver (the driver's JIT)");
  // The null driver's own cuLink* keeps each kernel's parameters, pointers marked, beside the
  // image: by default it assembles; asked for, libnvJitLink's cubins load there too.
  if (cuda::null_gpu_library() && !(choice && *choice)) return nullptr;
  static const std::optional<kernels::NvJitLink> loaded = load_nvjitlink();
  return loaded ? &*loaded : nullptr;
}

std::vector<char> CudaDevice::assemble(const std::string& ptx, const std::string& symbol) {
  if (const kernels::NvJitLink* assembler = ptx_assembler()) {
    std::string cubin, errors;
    std::string arch = kernels::NvJitLink::arch_for(ptx, info_.compute_capability);
    if (!assembler->assemble(ptx, arch, cubin, errors))
      throw std::runtime_error("sinter: libnvJitLink rejected the PTX of " + symbol + " for " +
                               arch + ": " + errors);
    return std::vector<char>(cubin.begin(), cubin.end());
  }
  std::array<char, 8192> errors{}, messages{};
  std::array<int, 4> options{cuda::jit_error_log_buffer, cuda::jit_error_log_buffer_size,
                             cuda::jit_info_log_buffer, cuda::jit_info_log_buffer_size};
  std::array<void*, 4> values{errors.data(), reinterpret_cast<void*>(errors.size()),
                              messages.data(), reinterpret_cast<void*>(messages.size())};
  cuda::LinkHandle link = nullptr;
  driver_.check(driver_.cuLinkCreate(4, options.data(), values.data(), &link), "cuLinkCreate");
  // The driver reads the PTX as a C string: pass its terminating NUL too.
  cuda::Result added =
      driver_.cuLinkAddData(link, cuda::jit_input_ptx, const_cast<char*>(ptx.c_str()),
                            ptx.size() + 1, symbol.c_str(), 0, nullptr, nullptr);
  void* cubin = nullptr;
  std::size_t size = 0;
  cuda::Result completed = added == 0 ? driver_.cuLinkComplete(link, &cubin, &size) : added;
  if (completed != 0) {
    driver_.cuLinkDestroy(link);
    throw std::runtime_error("sinter: the CUDA driver rejected the PTX of " + symbol + " for sm_" +
                             std::to_string(info_.compute_capability) + ": " +
                             std::string(errors.data()));
  }
  std::vector<char> out(static_cast<char*>(cubin), static_cast<char*>(cubin) + size);
  driver_.cuLinkDestroy(link); // owns the cubin memory
  return out;
}

RowsKernelRequest::RowsKernelRequest(const FusionPlan& plan, const Kernel& kernel,
                                     RuntimeRowsKernel rows_kernel, const GpuLaunch& step_launch)
    : step_plan(&plan), step_kernel(&kernel), rows(std::move(rows_kernel)), launch(step_launch),
      keyed(rows.instance(nvptx_rows_extent)) {}

KernelRequest RowsKernelRequest::request() const {
  std::string variant =
      "rows parameter;strategy " + std::to_string(static_cast<int>(launch.strategy)) + ";threads " +
      std::to_string(launch.threads) + ";vector " + std::to_string(launch.vector_width);
  return KernelRequest{.plan = &keyed.plan,
                       .kernel = &keyed.kernel(),
                       .variant = std::move(variant),
                       .step_plan = step_plan,
                       .step_kernel = step_kernel};
}

int64_t CudaDevice::free_bytes() const {
  make_current();
  std::size_t free = 0, total = 0;
  driver_.check(driver_.cuMemGetInfo(&free, &total), "cuMemGetInfo");
  return static_cast<int64_t>(free);
}

std::vector<std::optional<RuntimeRowsKernel>> capture_shapes(const FusionPlan& plan) {
  std::vector<std::optional<RuntimeRowsKernel>> out(plan.kernels.size());
  for (std::size_t i = 0; i < plan.kernels.size(); ++i)
    switch (plan.kernels[i].kind) {
    case KernelKind::row:
    case KernelKind::loop:
    case KernelKind::reduce:
    case KernelKind::scatter_add: out[i] = RuntimeRowsKernel::capture(plan, plan.kernels[i]); break;
    default: break;
    }
  return out;
}

std::optional<RuntimeRowsKernel> CudaDevice::sized_kernel(const RuntimeRowsKernel& now) {
  std::lock_guard lock(mutex_);
  auto before = planned_kernels_.find(now.signature());
  if (before == planned_kernels_.end()) return std::nullopt;
  for (const RuntimeRowsKernel& other : before->second)
    if (auto sized = RuntimeRowsKernel::unify(now, other)) return sized;
  return std::nullopt;
}

void CudaDevice::remember_shapes(std::vector<std::optional<RuntimeRowsKernel>> captured) {
  // A few shapes of each signature: a plan at one of them still finds another to unify with,
  // and kernels alike but for their sizes within one plan (the query, key and value slices of
  // a fused projection) each keep theirs.
  constexpr std::size_t shapes_kept = 8;
  std::lock_guard lock(mutex_);
  for (std::optional<RuntimeRowsKernel>& kernel : captured) {
    if (!kernel) continue;
    std::vector<RuntimeRowsKernel>& kept = planned_kernels_[kernel->signature()];
    if (kept.size() < shapes_kept &&
        std::none_of(kept.begin(), kept.end(),
                     [&](const RuntimeRowsKernel& k) { return k.same_numbers(*kernel); }))
      kept.push_back(std::move(*kernel));
  }
}

std::vector<char> CudaDevice::compile_rows(const RowsKernelRequest& request,
                                           const std::string& symbol) {
  std::string ptx;
  try {
    ptx = target_->compile(request.rows, request.launch, symbol);
  } catch (const RowsDependentCode&) {
    std::lock_guard lock(mutex_);
    rows_dependent_.insert(kernels_->key_of(request.request()).hex());
    throw;
  }
  make_current(); // the context is current per thread
  return assemble(ptx, symbol);
}

void CudaDevice::compile_ahead(const FusionPlan& plan, std::span<const Kernel* const> kernels,
                               std::span<const RowsKernelRequest* const> rows_kernels,
                               KernelCache& cache) {
  std::vector<KernelRequest> requests;
  for (const Kernel* kernel : kernels)
    requests.push_back({.plan = &plan, .kernel = kernel});
  for (const RowsKernelRequest* rows : rows_kernels)
    requests.push_back(rows->request());
  kernels_->compile_ahead(
      requests, cache,
      [&](const KernelRequest& request, const std::string& symbol) {
        auto index = static_cast<std::size_t>(&request - requests.data());
        if (index >= kernels.size())
          return compile_rows(*rows_kernels[index - kernels.size()], symbol);
        make_current(); // the context is current per thread
        return assemble(target_->compile(plan, *request.kernel, symbol), symbol);
      },
      static_cast<unsigned>(compile_thread_count()));
}

cuda::FunctionHandle CudaDevice::load(std::span<const char> cubin, const std::string& symbol) {
  return load_into(modules_, cubin, symbol);
}

cuda::FunctionHandle CudaDevice::load_into(std::vector<cuda::ModuleHandle>& modules,
                                           std::span<const char> cubin, const std::string& symbol) {
  make_current();
  cuda::ModuleHandle module = nullptr;
  driver_.check(driver_.cuModuleLoadDataEx(&module, cubin.data(), 0, nullptr, nullptr),
                "cuModuleLoadDataEx");
  modules.push_back(module);
  cuda::FunctionHandle function = nullptr;
  driver_.check(driver_.cuModuleGetFunction(&function, module, symbol.c_str()),
                "cuModuleGetFunction");
  return function;
}

cuda::FunctionHandle CudaDevice::hand_written_kernel(const std::string& ptx,
                                                     const std::string& symbol) {
  std::lock_guard lock(mutex_);
  if (auto it = hand_written_.find(symbol); it != hand_written_.end()) return it->second;
  make_current();
  return hand_written_[symbol] = load_into(hand_written_modules_, assemble(ptx, symbol), symbol);
}

cuda::FunctionHandle CudaDevice::kernel(const FusionPlan& plan, const Kernel& kernel,
                                        KernelCache& cache, CompileReport& report) {
  return kernels_->get(
      plan, kernel, cache, report,
      [&](const std::string& symbol) {
        make_current();
        return assemble(target_->compile(plan, kernel, symbol), symbol);
      },
      [&](std::span<const char> cubin, const std::string& symbol) { return load(cubin, symbol); });
}

cuda::FunctionHandle CudaDevice::rows_kernel(const RowsKernelRequest& request, KernelCache& cache,
                                             CompileReport& report) {
  KernelRequest lookup = request.request();
  {
    std::lock_guard lock(mutex_);
    if (rows_dependent_.contains(kernels_->key_of(lookup).hex())) return nullptr;
  }
  try {
    return kernels_->get(
        lookup, cache, report,
        [&](const std::string& symbol) { return compile_rows(request, symbol); },
        [&](std::span<const char> cubin, const std::string& symbol) {
          return load(cubin, symbol);
        });
  } catch (const RowsDependentCode&) {
    return nullptr;
  }
}

} // namespace sinter
