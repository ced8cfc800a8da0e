// jit/backend/cuda/cuda_device.hpp — one GPU: primary context, streams, workspace, and its
// kernels through the shared lookup (PTX assembled to cubins by libnvJitLink or the driver)
#pragma once
#include "jit/backend/cuda/cuda_driver.hpp"
#include "jit/backend/cuda/nvptx_target.hpp"
#include "jit/runtime/kernel_cache.hpp"
#include "jit/runtime/kernel_lookup.hpp"

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace sinter {
namespace kernels {
struct NvJitLink;
}

/// The in-process PTX assembler CUDA compiles use (libnvJitLink, on each compile thread), or
/// nullptr where the driver's JIT assembles: SINTER_PTX_ASSEMBLER=driver, the null driver unless
/// SINTER_PTX_ASSEMBLER=jitlink asks (its cuLink* keeps each kernel's signature beside the
/// image), or no libnvJitLink found. Throws for
/// a SINTER_PTX_ASSEMBLER other than `jitlink` or `driver`, or a SINTER_LIBNVJITLINK that does
/// not load.
const kernels::NvJitLink* ptx_assembler();

/// Device memory, freed with its owner.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  cuda::DevicePtr get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

private:
  cuda::DevicePtr ptr_ = 0;
  std::size_t bytes_ = 0;
};

/// The driver hands out device memory in whole pages of this size: an allocation of 2.1 MiB
/// holds 4 MiB. What a step allocates is therefore planned per allocation, rounded up
/// (device_pages), and its many small buffers share a few allocations (packed_device_buffers).
inline constexpr std::size_t device_page_bytes = std::size_t{2} << 20;
/// `bytes` as the device pages one allocation of that size takes (0 for none).
constexpr std::size_t device_pages(std::size_t bytes) {
  return (bytes + device_page_bytes - 1) / device_page_bytes * device_page_bytes;
}
/// Where each of several buffers sits in one allocation: 256-byte aligned, at least 16 bytes
/// each (what kernels' vector accesses need). `total` is the allocation's size.
struct PackedLayout {
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
};
PackedLayout pack_buffers(std::span<const std::size_t> bytes);

/// A buffer inside a shared allocation, which it keeps alive (a carried value read after its
/// step was released still finds its memory).
struct DeviceSpan {
  std::shared_ptr<const DeviceBuffer> allocation;
  cuda::DevicePtr ptr = 0;
  std::size_t bytes = 0;
  cuda::DevicePtr get() const { return ptr; }
  explicit operator bool() const { return allocation != nullptr; }
};
/// One allocation holding a buffer of each size in `bytes` (pack_buffers' layout).
std::vector<DeviceSpan> allocate_packed(std::span<const std::size_t> bytes);

/// Page-locked host memory: the staging area of asynchronous copies.
class PinnedBuffer {
public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A kernel whose row count is its last launch parameter (RuntimeRowsKernel), standing for a
/// step's kernel: one binary serves every batch size and sequence length.
struct RowsKernelRequest {
  RowsKernelRequest(const FusionPlan& plan, const Kernel& kernel, RuntimeRowsKernel rows,
                    const GpuLaunch& launch);
  const FusionPlan* step_plan;
  const Kernel* step_kernel;
  RuntimeRowsKernel rows;
  GpuLaunch launch;   ///< the step kernel's: the code is scheduled for its strategy and widths
  RowsInstance keyed; ///< rows.instance(nvptx_rows_extent): what the cache key describes
  /// The lookup's request: `keyed` with the launch's strategy, block and vector widths.
  KernelRequest request() const;
};

/// Each kernel of `plan` that may take a runtime size (loop, row, reduce, scatter), captured
/// once (RuntimeRowsKernel::capture) for CudaDevice::sized_kernel and remember_shapes; nullopt
/// for the others.
std::vector<std::optional<RuntimeRowsKernel>> capture_shapes(const FusionPlan& plan);

class CudaDevice {
public:
  /// GPU `ordinal` of this process (built on first use, kept for the process). Throws
  /// std::runtime_error saying why when CUDA is unavailable or there is no such GPU.
  static CudaDevice& get(int ordinal);

  const cuda::DeviceInfo& info() const { return info_; }
  const cuda::Driver& driver() const { return driver_; }
  /// Binds the device's context to the calling thread (every entry point calls it).
  void make_current() const;
  /// The same without throwing: false when the driver refuses (at process exit it may already
  /// be shut down, CUDA_ERROR_DEINITIALIZED). For destructors.
  bool try_make_current() const noexcept;
  /// The stream every step of this device runs on, in order.
  cuda::StreamHandle stream() const { return stream_; }
  /// A second stream for host→device copies of the next step's inputs, so they overlap the
  /// step running on stream().
  cuda::StreamHandle copy_stream() const { return copy_stream_; }
  /// Device memory free now (cuMemGetInfo).
  int64_t free_bytes() const;
  /// Scratch memory for cuBLASLt (kernels::CublasLt::workspace_bytes).
  cuda::DevicePtr gemm_workspace();
  /// Whether gemm_workspace() has allocated it already (a plan then does not count it again).
  bool has_gemm_workspace() const {
    std::lock_guard lock(mutex_);
    return workspace_.get() != 0;
  }

  /// The kernel's function: loaded already, a cubin from the disk cache, or PTX from the
  /// NVPTX target assembled by the driver (and the cubin stored). The key is the CPU scheme's
  /// with this target: sm_XX, PTX ISA, libdevice and the driver version.
  cuda::FunctionHandle kernel(const FusionPlan& plan, const Kernel& kernel, KernelCache& cache,
                              CompileReport& report);
  /// The function of a kernel with a rows parameter, as kernel() finds it; nullptr when the
  /// kernel's code depends on its row count in other ways (remembered for the process: the
  /// caller compiles the step's kernel for its shape instead).
  cuda::FunctionHandle rows_kernel(const RowsKernelRequest& request, KernelCache& cache,
                                   CompileReport& report);
  /// `now` (a RuntimeRowsKernel::capture) with its changed dim as the runtime size
  /// (RuntimeRowsKernel::unify) when a kernel alike in all but its numbers was remembered from
  /// another plan (another shape bucket); nullopt otherwise.
  std::optional<RuntimeRowsKernel> sized_kernel(const RuntimeRowsKernel& now);
  /// Remembers captured kernels (capture_shapes) for sized_kernel: those of each plan this
  /// device launches, after its lookups, and of plans of the same step at other shape buckets.
  void remember_shapes(std::vector<std::optional<RuntimeRowsKernel>> captured);
  /// Compiles the kernels among `kernels` and `rows_kernels` that are neither loaded nor
  /// cached on several threads (SINTER_NUM_THREADS), so that kernel() and rows_kernel() then
  /// find them ready.
  void compile_ahead(const FusionPlan& plan, std::span<const Kernel* const> kernels,
                     std::span<const RowsKernelRequest* const> rows_kernels, KernelCache& cache);
  /// A hand-written kernel (kernels/cuda/) from its PTX, assembled by the driver once per
  /// device and kept.
  cuda::FunctionHandle hand_written_kernel(const std::string& ptx, const std::string& symbol);
  NvptxTarget& target() { return *target_; }

  ~CudaDevice();

private:
  CudaDevice(const cuda::Driver& driver, int ordinal);
  std::vector<char> assemble(const std::string& ptx, const std::string& symbol);
  cuda::FunctionHandle load(std::span<const char> cubin, const std::string& symbol);
  /// Loads `cubin` as a module kept in `modules` (unloaded with the device).
  cuda::FunctionHandle load_into(std::vector<cuda::ModuleHandle>& modules,
                                 std::span<const char> cubin, const std::string& symbol);
  std::vector<char> compile_rows(const RowsKernelRequest& request, const std::string& symbol);

  const cuda::Driver& driver_;
  cuda::DeviceInfo info_;
  int handle_ = 0;
  cuda::ContextHandle context_ = nullptr;
  cuda::StreamHandle stream_ = nullptr, copy_stream_ = nullptr;
  std::unique_ptr<NvptxTarget> target_;
  std::unique_ptr<KernelLookup<cuda::FunctionHandle>> kernels_;
  DeviceBuffer workspace_;
  mutable std::mutex mutex_;
  std::vector<cuda::ModuleHandle> modules_;        ///< loaded cubins (under kernels_'s lock)
  std::unordered_set<std::string> rows_dependent_; ///< keys of RowsDependentCode kernels
  /// hand_written_kernel's, by symbol, and their modules (under mutex_).
  std::unordered_map<std::string, cuda::FunctionHandle> hand_written_;
  std::vector<cuda::ModuleHandle> hand_written_modules_;
  /// Kernels planned before, by signature, of distinct shapes (RuntimeRowsKernel::signature).
  std::unordered_map<std::string, std::vector<RuntimeRowsKernel>> planned_kernels_;
};

} // namespace sinter
