// tests/support/null_cuda/null_state.hpp — the null driver's one state: the configured devices,
// their memory as reserved address space, streams, events, captured graphs and the cost model
#pragma once
#include "null_gpu.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

/// An entry point the library exports (everything else stays hidden).
#define NULL_GPU_API extern "C" __attribute__((visibility("default")))

namespace sinter::null_gpu {

// CUresult values the null driver returns (cuda.h).
enum Status : int {
  success = 0,
  invalid_value = 1,
  out_of_memory = 2,
  not_initialized = 3,
  no_device = 100,
  invalid_device = 101,
  invalid_image = 200,
  invalid_context = 201,
  invalid_ptx = 218,
  invalid_handle = 400,
  not_found = 500,
  illegal_address = 700,
  launch_out_of_resources = 701,
  capture_unsupported = 900,
  capture_invalidated = 901,
  unknown = 999,
};
const char* status_name(int status);
const char* status_text(int status);

/// A device as SINTER_NULL_GPU_DEVICE describes it (a preset, then key=value overrides).
struct DeviceSpec {
  std::string name = "NVIDIA H100 80GB HBM3";
  int compute_capability = 90;
  int multiprocessors = 132;
  uint64_t memory = 81559ull << 20; ///< what cuDeviceTotalMem reports (nvidia-smi: 81559 MiB)
  uint64_t reserve = 512ull << 20;  ///< taken by a context when it is created
  double bandwidth = 2.95e12;       ///< device memory, bytes/s (measured on the H100)
  double flops = 853e12;            ///< dense bf16/f16/tf32 GEMMs, FLOP/s (measured)
  double fp32_flops = 60e12;        ///< f32 and f64 GEMMs without tensor cores
  double host_bandwidth = 50e9;     ///< host <-> device copies, bytes/s
  double link_bandwidth = 400e9;    ///< collectives between GPUs, bytes/s
  double launch_seconds = 2e-6;     ///< what a kernel takes at least (the cost model's floor)
  int count = 1;                    ///< devices visible
};
/// Parses `text` ("h100", "h200", "a100", then ",key=value" pairs); throws std::invalid_argument
/// naming the bad part.
DeviceSpec parse_device_spec(const std::string& text);

/// Work on a stream, or a node of a captured graph.
struct Work {
  enum Kind { kernel, gemm, collective, memset, copy_h2d, copy_d2h, copy_d2d, event } kind;
  double seconds = 0;
  uint64_t bytes = 0;
  bool pageable = false;
  struct EventState* record = nullptr;               ///< kind == event: the event recorded
  std::vector<std::pair<uint64_t, uint64_t>> ranges; ///< device ranges it touches
  // Copies and memsets: where the bytes go (moved only with SINTER_NULL_GPU_COPIES=1; without
  // it a download writes zeros).
  const void* from = nullptr;
  void* to = nullptr;
  unsigned char value = 0;
  /// Kernels the null driver runs with copies on (the --check-numerics scan): what it does.
  std::function<void()> emulate;
};

struct GraphState {
  std::vector<Work> nodes;
};

struct StreamState {
  double clock = 0;                      ///< when the work enqueued so far ends, seconds
  std::unique_ptr<GraphState> capturing; ///< set between begin and end capture
  int capture_mode = 0;
  bool capture_broken = false;
  std::string capture_error;
};

struct EventState {
  double time = 0;
  bool recorded = false;
};

struct Allocation {
  uint64_t bytes = 0;
  int device = 0;
};

/// Parameters of a kernel: their sizes and which are pointers (".ptr" in the PTX).
struct KernelSignature {
  std::string name;
  std::vector<std::pair<std::size_t, bool>> parameters; ///< bytes, pointer
};

struct ModuleState;

struct FunctionState {
  ModuleState* module = nullptr;
  const KernelSignature* signature = nullptr;
  /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: a launch may take more than 48 KB of
  /// dynamic shared memory only up to what the function asked for.
  int max_dynamic_shared = 48 * 1024;
};

struct ModuleState {
  std::vector<KernelSignature> kernels;
  uint64_t bytes = 0;
  bool cubin = false; ///< a real cubin (an ELF image), not this driver's container or PTX
  int device = 0;
  /// The handles cuModuleGetFunction gave out: valid until the module is unloaded, as CUDA's.
  std::vector<std::unique_ptr<FunctionState>> functions;
};

struct ContextState {
  int device = 0;
};

/// The driver's state: one per process, never destroyed (sinter releases what it holds while
/// the process exits, in an order the driver cannot know).
class State {
public:
  static State& get();
  std::mutex mutex;

  bool initialized = false;
  /// SINTER_NULL_GPU_COPIES=1: device memory is backed (committed as it is written) and
  /// copies and memsets move real bytes, so the host's data path can be checked end to end;
  /// kernels and GEMMs still run nothing.
  bool copies = false;
  DeviceSpec spec;
  std::string spec_error;
  std::vector<std::unique_ptr<ContextState>> contexts; ///< one primary context per device
  std::vector<int> context_refs;
  std::vector<uint64_t> device_used; ///< per device: allocations + modules + context reserve

  std::map<uint64_t, Allocation> device_memory; ///< base address -> allocation
  std::map<uintptr_t, uint64_t> pinned;         ///< base address -> bytes
  uint64_t frees = 0;                           ///< cuMemFree calls: graphs recheck after one

  NullGpuCounters counters{};

  /// The context current on this thread, or null.
  static ContextState*& current();
  /// The stream a handle names: null is the legacy default stream.
  StreamState& stream(void* handle);

  /// Whether [address, address + bytes) lies in one live device allocation.
  bool device_range_ok(uint64_t address, uint64_t bytes) const;
  bool host_is_pinned(const void* address) const;
  uint64_t device_free(int device) const;

  /// Runs `work` on `stream` (the clock moves and the counters count) or, while the stream is
  /// being captured, adds it to the graph.
  void enqueue(StreamState& stream, Work work);
  /// Counts work that ran (directly, or as a launched graph's node) and moves its bytes.
  void perform(const Work& work);

  /// Remembers why the last call failed, for cuGetErrorString; returns `status`.
  int fail(int status, std::string detail);
  static std::string& last_detail();
  static int& last_status();
  /// success, or the failure of a call made before cuInit or with no context current.
  int need_context();

  std::string report() const;
  std::string describe() const;

private:
  State();
  StreamState default_stream_;
};

/// The kernels a PTX text defines (".entry name(...)") with their parameters.
std::vector<KernelSignature> parse_ptx_entries(const std::string& ptx);

} // namespace sinter::null_gpu
