// jit/profile/profiler.hpp — the step profiler: per-kernel and per-phase times, the trace file,
// the summary with verdicts (docs/profiling.md)
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sinter {
class ThreadPool;
}

namespace sinter::profile {

/// Nanoseconds on the steady clock (the trace's time base).
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// What part of a training step a kernel does, judged from the model path it was traced under
/// (`….bwd` is backward, `optimizer.…` the update) and the inputs it reads (a distillation
/// teacher's `teacher.*` weights and no trained parameter: the teacher's forward).
enum class Role : uint8_t { forward, backward, optimizer, teacher, collective };
const char* role_name(Role role);

/// One kernel of a compiled program, as the profile names and measures it.
struct KernelInfo {
  std::string name; ///< `k12 layers.1.bwd gemm matmul`: index, model path, kind, root op
  std::string path; ///< the model path (`blocks.3.attn`; empty at the top level)
  std::string kind; ///< loop, reduce, row, gemm, attention, scatter, collective
  Role role = Role::forward;
  bool gemm = false;            ///< a GEMM (library matmul)
  int64_t bytes = 0;            ///< bytes the kernel reads and writes (its buffers, from the IR)
  int64_t flops = 0;            ///< floating-point operations (GEMMs 2·m·n·k; elementwise 1 per op)
  double predicted_seconds = 0; ///< the GPU cost model's time per call (0: none)
};

/// The measured peak of the device the kernels ran on: what "achieved share" divides by.
struct DevicePeak {
  double bytes_per_second = 0; ///< the best memory bandwidth (read + write) of any working set
  double flops_per_second = 0; ///< f32 GEMM rate
  /// Bandwidth by working set: (bytes moved per call, bytes per second). A kernel is judged
  /// against the entry for the smallest working set that holds its bytes: one that fits in the
  /// caches is held to the caches' rate, a larger one to the memory's.
  std::vector<std::pair<int64_t, double>> bandwidth_by_bytes;
  std::string how; ///< how it was measured
  /// The bandwidth a kernel moving `bytes` per call can reach.
  double bandwidth_for(int64_t bytes) const;
  /// Sets bytes_per_second to the curve's best and makes the curve non-increasing (a larger
  /// working set is never faster than a smaller one: it smooths the noise of short timings).
  void finish_curve();
};

/// The CPU's peak as the CPU backend runs (each of `pool`'s threads, or one without a pool):
/// a streaming scale over 16 KiB to 64 MiB per thread, an f32 GEMM of 512³ per thread.
DevicePeak measure_cpu_peak(ThreadPool* pool);

struct Options {
  /// Steps whose kernels go into trace.json (every step's phases are always traced).
  int64_t traced_steps = 20;
  /// Steps left out of the statistics at the start (the first call's warm-up).
  int64_t skip_steps = 1;
  /// How often per-core CPU use is sampled (/proc/stat).
  double cpu_sample_seconds = 0.1;
  /// Print the summary on stderr when the profile stops.
  bool print = true;
};

/// One conclusion of the profile: its kind (`input-bound`, `host-bound`, `gemm-bound`,
/// `memory-bound`, `recompiles`), the share or count it rests on, and the printed line with
/// its action.
struct Verdict {
  std::string kind;
  double value = 0;
  std::string line;
};

/// Mean time per counted step in each phase.
struct PhaseTimes {
  double data = 0;           ///< waiting for the data loader
  double copies = 0;         ///< host→device copies of the batch
  double forward = 0;        ///< forward kernels of the trained model
  double teacher = 0;        ///< a distillation teacher's forward
  double backward = 0;       ///< gradient kernels
  double optimizer = 0;      ///< the update (clipping, AdamW, loss scaling)
  double collectives = 0;    ///< all-reduce, reduce-scatter, all-gather (waits included)
  double other_programs = 0; ///< programs run between steps (evaluation)
  double host = 0;           ///< everything else: launches, the loop's own host work
  double step = 0;           ///< the whole step period (end of one step to the end of the next)
  /// Every phase but `step`, named, in the order above.
  std::vector<std::pair<const char*, double>> parts() const;
};

/// One row of the kernel table: a kernel and its totals over the counted steps.
struct KernelRow {
  KernelInfo info;
  std::string program; ///< which program it belongs to
  int64_t calls = 0;
  double seconds = 0;        ///< total
  double share = 0;          ///< of all kernel time
  bool memory_bound = false; ///< by the roofline: intensity below peak FLOP/s ÷ bandwidth
  double achieved = 0;       ///< share of the device peak it reached (bandwidth or FLOP/s)
};

/// What a profile found, as printed and written to DIR/summary.txt.
struct Summary {
  std::filesystem::path dir;
  int64_t steps = 0;   ///< counted steps
  int64_t skipped = 0; ///< steps left out (the first, those with a compile inside)
  int64_t compiles = 0;
  PhaseTimes phases;
  DevicePeak peak;
  std::vector<KernelRow> kernels;                      ///< by total time, largest first
  std::vector<std::pair<std::string, double>> modules; ///< seconds per model path
  std::vector<double> cpu_use;                         ///< mean busy share per core
  int loader_threads = -1;                             ///< -1: no DataLoader seen
  double device_reads = 0;        ///< device results the host read per counted step (GPU syncs)
  double device_read_seconds = 0; ///< per counted step, the host's time in those reads
  std::vector<Verdict> verdicts;
  /// The printed summary: phases, top kernels, verdicts.
  std::string text() const;
};

/// Starts profiling into `dir` (created if missing): from now on every compiled program's
/// kernels are timed, training steps split into phases, loader waits recorded. Throws
/// std::logic_error if a profile is already running, std::runtime_error if `dir` cannot be
/// created.
void start(const std::filesystem::path& dir, Options options = {});
/// start(), and stop() when the process exits (a failure to write is printed then).
void start_until_exit(const std::filesystem::path& dir, Options options = {});
/// Whether a profile is running (one relaxed atomic load).
bool active();
/// Stops the profile and writes DIR/trace.json (Chrome trace events: open in Perfetto or
/// chrome://tracing), DIR/report.html and DIR/summary.txt, each atomically; prints the summary
/// on stderr unless Options::print is false. Throws std::logic_error if none is running.
Summary stop();
/// Starts a profile into $SINTER_PROFILE when it is set and none runs yet; it then stops (and
/// writes) when the process exits. Every compiled program calls this, so the variable alone
/// profiles any program.
void start_from_environment();

/// When kernel `kernel` of a program run began and ended (ns).
struct KernelTime {
  std::size_t kernel;
  int64_t begin, end;
};

/// A unique id for a compiled program (its kernels' table in the profile).
uint64_t new_program_id();

/// Times one run of a compiled program, kernel by kernel, when a profile is running; does
/// nothing otherwise (one atomic load). `describe` is called once per program to name and
/// measure its kernels; `device_peak` once per profile, by the first program that runs (the
/// device every kernel's achieved share is judged against).
class ProgramRun {
public:
  ProgramRun(uint64_t program, std::string_view label,
             const std::function<std::vector<KernelInfo>()>& describe,
             const std::function<DevicePeak()>& device_peak);
  ~ProgramRun();
  ProgramRun(const ProgramRun&) = delete;
  ProgramRun& operator=(const ProgramRun&) = delete;
  explicit operator bool() const { return on_; }
  /// Kernel `k` starts / ends now.
  void begin(std::size_t) {
    if (on_) begun_ = now_ns();
  }
  void end(std::size_t k) {
    if (on_) times_.push_back({k, begun_, now_ns()});
  }
  /// Kernel `k` ran from `begin` to `end` (ns on the profile's clock): a GPU kernel, timed by
  /// events and placed after the host's launch.
  void kernel(std::size_t k, int64_t begin, int64_t end) {
    if (on_) times_.push_back({k, begin, end});
  }
  /// Time spent copying the batch to the device (GPU backends).
  void copies(int64_t begin, int64_t end);
  /// The kernels go on the trace track `name` (a GPU stream) instead of the calling thread's.
  void on_track(std::string name) { track_ = std::move(name); }

private:
  bool on_ = false;
  uint64_t program_ = 0;
  int64_t run_begin_ = 0, begun_ = 0, copies_ns_ = 0;
  std::vector<KernelTime> times_;
  std::string track_;
};

/// Marks one training step (TrainStep::operator()): the phases are split per step.
class StepScope {
public:
  StepScope();
  ~StepScope();
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

private:
  bool on_ = false;
};

/// The consumer waited for the data loader from `begin` to `end` (ns): counted in the next
/// step's data phase.
void data_wait(int64_t begin, int64_t end);
/// The host read a device result (a GPU step's output, fetched on first access) from `begin`
/// to `end` (ns): a sync with the device, counted per step for the host-syncs verdict.
void device_read(int64_t begin, int64_t end);
/// A loader thread filled a batch from `begin` to `end` (ns): traced on that thread's track.
void loader_fill(int64_t begin, int64_t end, int64_t batch);
/// A DataLoader with `threads` prefetch threads exists (the input-bound verdict names it).
void loader_threads(int threads);
/// A program was compiled from `begin` to `end` (ns).
void compiled(std::string_view label, int64_t begin, int64_t end);
/// A recompile and why (CompiledStep's log line): counted and named by the verdict.
void recompiled(std::string_view reason);

} // namespace sinter::profile
