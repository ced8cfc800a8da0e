// tests/support/null_cuda/null_gpu.h — what the null CUDA driver counts, as the C interface
// its library exports beside the CUDA entry points (tests and tests/bench read it)
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Everything the null driver has seen since it loaded, or since sinterNullGpuResetCounters
/// (which keeps what is allocated now and starts the peaks from it).
struct NullGpuCounters {
  // Device memory (every device together), as the driver would hand it out.
  uint64_t device_bytes;      ///< live cuMemAlloc bytes
  uint64_t device_peak_bytes; ///< the most live at once
  uint64_t device_allocations;
  uint64_t device_failed_allocations; ///< refused: more than the device has free
  uint64_t module_bytes;              ///< device memory of loaded modules (their images)
  uint64_t context_bytes; ///< the contexts' own reserve (SINTER_NULL_GPU_DEVICE reserve=)
  // Pinned host memory (cuMemAllocHost): real host memory.
  uint64_t pinned_bytes;
  uint64_t pinned_peak_bytes;
  // Work enqueued. A graph's nodes count when the graph is launched, not when captured.
  uint64_t kernel_launches;
  uint64_t gemms; ///< cublasLtMatmul calls
  uint64_t collectives;
  uint64_t memsets;
  uint64_t copies_host_to_device;
  uint64_t bytes_host_to_device;
  uint64_t bytes_host_to_device_pageable; ///< of those, from memory that is not pinned
  uint64_t copies_device_to_host;
  uint64_t bytes_device_to_host;
  uint64_t copies_device_to_device;
  uint64_t bytes_device_to_device;
  uint64_t graph_launches;
  uint64_t graph_nodes_launched;
  uint64_t last_graph_nodes; ///< nodes of the graph launched last
  uint64_t host_syncs;       ///< cuStreamSynchronize, cuEventSynchronize, synchronous copies
  // Modules: PTX assembled by cuLink* (ptxas when found) and images loaded.
  uint64_t ptx_assembled;
  uint64_t ptxas_runs;
  double ptxas_seconds;
  double ptxas_longest_seconds; ///< the slowest single assembly (a parallel compile's floor)
  uint64_t modules_loaded;
  uint64_t cubins_loaded; ///< of those, real cubins (ELF images: libnvJitLink's or a driver's)
  // The device's clock: what the cost model says the work enqueued so far takes.
  double device_seconds;
};

/// Copies the counters into *out.
void sinterNullGpuCounters(struct NullGpuCounters* out);
/// Zeroes the counters of work, copies, syncs and modules; the live allocations stay counted
/// and their peaks restart from them.
void sinterNullGpuResetCounters(void);
/// One line describing the null device, e.g. "NVIDIA H100 80GB HBM3 (null driver: sm_90, ...)".
const char* sinterNullGpuDescribe(void);
/// The counters as one line of key=value pairs (what SINTER_NULL_GPU_REPORT appends at exit);
/// returns the length, writing at most `size` bytes with a terminating NUL.
size_t sinterNullGpuReport(char* buffer, size_t size);

#ifdef __cplusplus
}
#endif
