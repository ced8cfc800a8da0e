// jit/runtime/profiler.cpp — recording (kernels, steps, loader, CPU samples), the device peak,
// the summary's verdicts and the trace, report and summary files
#include "jit/runtime/profiler.hpp"
#include "jit/settings.hpp"

#include "jit/backend/cpu/thread_pool.hpp"
#include "jit/io/atomic_file.hpp"
#include "jit/io/json.hpp"
#include "jit/runtime/memory_plan.hpp"
#include "jit/runtime/profile_report.hpp"
#include "kernels/blas_gemm.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_map>

namespace sinter::profile {

const char* role_name(Role role) {
  switch (role) {
  case Role::forward: return "forward";
  case Role::backward: return "backward";
  case Role::optimizer: return "optimizer";
  case Role::teacher: return "teacher";
  case Role::collective: return "collective";
  }
  return "forward";
}

namespace {

constexpr std::size_t roles = 5;
/// Trace events kept at most (a long run's trace stays a few tens of MB).
constexpr std::size_t max_events = 400000;

enum class Category : uint8_t { step, data, fill, compile, run, kernel };

struct Event {
  Category category;
  uint32_t tid;
  int64_t begin, end;
  uint64_t program = 0; ///< run and kernel events
  int64_t index = 0;    ///< kernel: its index; step: its number; fill: the batch
};

struct Program {
  std::string label;
  std::vector<KernelInfo> kernels;
  std::vector<int64_t> calls, total_ns;
};

struct StepRecord {
  int64_t period_begin = 0, begin = 0, end = 0;
  int64_t data = 0, copies = 0, other = 0;
  int64_t reads = 0, read_ns = 0; ///< device results the host read, and its time in them
  int64_t role[roles] = {};
  bool compiled = false;
};

/// Per-core busy shares between two readings of /proc/stat.
class CpuReader {
public:
  std::vector<double> read() {
    std::ifstream stat("/proc/stat");
    std::vector<std::pair<uint64_t, uint64_t>> now; // (busy, total) per core
    std::string line;
    while (std::getline(stat, line)) {
      if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit(line[3])) continue;
      std::istringstream fields(line.substr(line.find(' ')));
      uint64_t v, total = 0, idle = 0;
      for (int i = 0; fields >> v; ++i) {
        total += v;
        if (i == 3 || i == 4) idle += v; // idle, iowait
      }
      now.emplace_back(total - idle, total);
    }
    std::vector<double> busy;
    if (now.size() == last_.size())
      for (std::size_t c = 0; c < now.size(); ++c) {
        double dt = static_cast<double>(now[c].second - last_[c].second);
        busy.push_back(dt > 0 ? static_cast<double>(now[c].first - last_[c].first) / dt : 0.0);
      }
    last_ = std::move(now);
    return busy;
  }

private:
  std::vector<std::pair<uint64_t, uint64_t>> last_;
};

class Profiler {
public:
  Profiler(std::filesystem::path dir, Options options)
      : dir_(std::move(dir)), options_(options), start_(now_ns()) {
    sampler_ = std::thread([this] { sample_cpu(); });
  }
  ~Profiler() { stop_sampler(); }

  void stop_sampler() {
    {
      std::lock_guard lock(sampler_mutex_);
      sampler_stop_ = true;
    }
    sampler_wake_.notify_all();
    if (sampler_.joinable()) sampler_.join();
  }

  bool knows(uint64_t program) {
    std::lock_guard lock(mutex_);
    return closed_ || programs_.count(program) != 0;
  }

  void add_program(uint64_t program, std::string_view label, std::vector<KernelInfo> kernels,
                   const std::function<DevicePeak()>& device_peak) {
    // The device peak is measured by the first program, before its first run (in the warm-up
    // step the statistics leave out), while its device surely exists.
    std::call_once(peak_once_, [&] { peak_ = device_peak(); });
    std::lock_guard lock(mutex_);
    if (closed_) return;
    Program& p = programs_[program];
    p.label = std::string(label);
    p.calls.assign(kernels.size(), 0);
    p.total_ns.assign(kernels.size(), 0);
    p.kernels = std::move(kernels);
  }

  void finish_run(uint64_t program, int64_t run_begin, int64_t copies,
                  std::span<const KernelTime> times, const std::string& kernel_track) {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    const uint32_t tid = thread_track("main");
    const uint32_t kernel_tid = kernel_track.empty() ? tid : named_track(kernel_track);
    auto found = programs_.find(program);
    if (found == programs_.end()) return;
    Program& p = found->second;
    const bool in_step = step_open_;
    const auto step_number = static_cast<int64_t>(steps_.size());
    const bool counted = !in_step || step_number >= options_.skip_steps;
    const bool traced = in_step ? step_number < options_.skip_steps + options_.traced_steps
                                : traced_outside_runs_ < options_.traced_steps;
    if (!in_step && traced) ++traced_outside_runs_;
    int64_t run_end = run_begin;
    for (const auto& [k, begin, end] : times) {
      if (k >= p.kernels.size()) continue;
      const int64_t ns = end - begin;
      run_end = std::max(run_end, end);
      if (counted) {
        ++p.calls[k];
        p.total_ns[k] += ns;
      }
      if (in_step) open_.role[static_cast<std::size_t>(p.kernels[k].role)] += ns;
      if (traced)
        add_event({Category::kernel, kernel_tid, begin, end, program, static_cast<int64_t>(k)});
    }
    if (in_step)
      open_.copies += copies;
    else
      pending_other_ += run_end - run_begin;
    if (traced) add_event({Category::run, tid, run_begin, run_end, program, 0});
  }

  void step_begin() {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    step_open_ = true;
    open_ = StepRecord{};
    open_.begin = now_ns();
  }

  void step_end() {
    std::lock_guard lock(mutex_);
    if (closed_ || !step_open_) return;
    step_open_ = false;
    open_.end = now_ns();
    open_.data = pending_data_;
    open_.other = pending_other_;
    open_.reads = pending_reads_;
    open_.read_ns = pending_read_ns_;
    pending_reads_ = pending_read_ns_ = 0;
    open_.period_begin = last_step_end_ ? last_step_end_ : open_.begin - pending_data_;
    open_.compiled = std::any_of(compiles_.begin(), compiles_.end(), [&](const auto& c) {
      return c.second > open_.period_begin && c.first < open_.end;
    });
    pending_data_ = pending_other_ = 0;
    last_step_end_ = open_.end;
    add_event({Category::step, thread_track("main"), open_.begin, open_.end, 0,
               static_cast<int64_t>(steps_.size())});
    steps_.push_back(open_);
  }

  void data_wait(int64_t begin, int64_t end) {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    pending_data_ += end - begin;
    if (end - begin > 2000) add_event({Category::data, thread_track("main"), begin, end, 0, 0});
  }

  void device_read(int64_t begin, int64_t end) {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    ++pending_reads_;
    pending_read_ns_ += end - begin;
  }

  void loader_fill(int64_t begin, int64_t end, int64_t batch) {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    add_event({Category::fill, thread_track("loader"), begin, end, 0, batch});
  }

  void loader_threads(int threads) {
    std::lock_guard lock(mutex_);
    loader_threads_ = threads;
  }

  void compiled(std::string_view label, int64_t begin, int64_t end) {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    compiles_.emplace_back(begin, end);
    compile_labels_.emplace_back(label);
    add_event({Category::compile, thread_track("main"), begin, end, 0,
               static_cast<int64_t>(compiles_.size() - 1)});
  }

  void recompiled(std::string_view reason) {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    recompiles_.emplace_back(reason);
  }

  Summary finish();
  bool prints() const { return options_.print; }

private:
  /// The track of the calling thread, named `kind` (and a number after the first) when new.
  /// Called with mutex_ held.
  uint32_t thread_track(const char* kind) {
    auto [it, fresh] = tids_.try_emplace(std::this_thread::get_id(), 0);
    if (fresh) {
      it->second = static_cast<uint32_t>(thread_names_.size() + 1);
      int same = 0;
      for (const std::string& name : thread_names_)
        same += name.rfind(kind, 0) == 0;
      thread_names_.push_back(std::string(kind) +
                              (std::string_view(kind) == "main" ? "" : " " + std::to_string(same)));
    }
    return it->second;
  }

  /// A track that is not a thread (a GPU stream), named `name`. Called with mutex_ held.
  uint32_t named_track(const std::string& name) {
    auto [it, fresh] = named_tids_.try_emplace(name, 0);
    if (fresh) {
      thread_names_.push_back(name);
      it->second = static_cast<uint32_t>(thread_names_.size());
    }
    return it->second;
  }

  void add_event(const Event& e) {
    if (events_.size() < max_events) events_.push_back(e);
  }

  void sample_cpu() {
    CpuReader reader;
    reader.read();
    std::unique_lock lock(sampler_mutex_);
    const auto period = std::chrono::duration<double>(options_.cpu_sample_seconds);
    while (!sampler_wake_.wait_for(lock, period, [&] { return sampler_stop_; })) {
      std::vector<double> busy = reader.read();
      if (!busy.empty()) cpu_samples_.emplace_back(now_ns(), std::move(busy));
    }
  }

  std::string trace_json(const Summary& summary) const;

  std::filesystem::path dir_;
  Options options_;
  int64_t start_;
  std::mutex mutex_;
  std::unordered_map<uint64_t, Program> programs_;
  std::vector<Event> events_;
  std::map<std::thread::id, uint32_t> tids_;
  std::map<std::string, uint32_t> named_tids_;
  std::vector<std::string> thread_names_;
  std::vector<StepRecord> steps_;
  StepRecord open_;
  bool step_open_ = false;
  int64_t pending_data_ = 0, pending_other_ = 0, last_step_end_ = 0;
  int64_t pending_reads_ = 0, pending_read_ns_ = 0; // device reads since the last step ended
  int64_t traced_outside_runs_ = 0;
  std::vector<std::pair<int64_t, int64_t>> compiles_;
  std::vector<std::string> compile_labels_;
  std::vector<std::string> recompiles_;
  int loader_threads_ = -1;
  std::once_flag peak_once_;
  DevicePeak peak_;
  /// Set by finish(): later calls from threads that loaded the pointer before stop() record
  /// nothing (the object itself is kept, so they never touch freed memory).
  bool closed_ = false;
  // The CPU sampler (its own lock: it never waits for the recording one).
  std::thread sampler_;
  std::mutex sampler_mutex_;
  std::condition_variable sampler_wake_;
  bool sampler_stop_ = false;
  std::vector<std::pair<int64_t, std::vector<double>>> cpu_samples_;
};

/// out = in · (1 + 1e-7), 16 floats at a time in the widest vectors the CPU has (the generated
/// kernels use them too); n is a multiple of 16.
using Floats16 = float __attribute__((vector_size(64)));
__attribute__((target_clones("avx512f", "avx2", "default"))) void
stream_scale(float* __restrict out, const float* __restrict in, std::size_t n) {
  for (std::size_t i = 0; i + 16 <= n; i += 16) {
    Floats16 v;
    std::memcpy(&v, in + i, sizeof v);
    v *= 1.0000001f;
    std::memcpy(out + i, &v, sizeof v);
  }
}

std::atomic<Profiler*> g_profiler{nullptr};
std::mutex g_lifecycle; // start and stop

} // namespace

void DevicePeak::finish_curve() {
  auto& curve = bandwidth_by_bytes;
  for (std::size_t i = curve.size(); i-- > 1;)
    curve[i - 1].second = std::max(curve[i - 1].second, curve[i].second);
  bytes_per_second = curve.empty() ? 0.0 : curve.front().second;
}

DevicePeak measure_cpu_peak(ThreadPool* pool) {
  DevicePeak peak;
  const int64_t threads = pool ? static_cast<int64_t>(pool->size()) : 1;
  auto parallel = [&](const std::function<void(std::size_t)>& body) {
    if (pool)
      pool->parallel_for(threads, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t)
          body(static_cast<std::size_t>(t));
      });
    else
      body(0);
  };
  auto best_of = [](int reps, const std::function<void()>& work) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      int64_t t0 = now_ns();
      work();
      best = std::min(best, static_cast<double>(now_ns() - t0) * 1e-9);
    }
    return best;
  };
  // Bandwidth by working set: every thread copies its own buffer, from cache-sized to well
  // past the last-level cache.
  // A streaming scale (read one float, write one) rather than memcpy: glibc's memcpy takes
  // paths whose speed depends on the size and the CPU model (rep movsb), which kernels never do.
  for (std::size_t per_thread :
       {std::size_t{16} << 10, std::size_t{64} << 10, std::size_t{256} << 10, std::size_t{1} << 20,
        std::size_t{4} << 20, std::size_t{16} << 20, std::size_t{64} << 20}) {
    const std::size_t floats = per_thread / sizeof(float);
    std::vector<std::vector<float>> from(static_cast<std::size_t>(threads)),
        to(static_cast<std::size_t>(threads));
    parallel([&](std::size_t t) {
      from[t].assign(floats, 1.0f);
      to[t].assign(floats, 0.0f);
    });
    // Small copies repeat inside each thread, so the pool's hand-out is not what is timed.
    const std::size_t repeats = std::max<std::size_t>(1, (std::size_t{4} << 20) / per_thread);
    const int reps = per_thread <= (std::size_t{4} << 20) ? 12 : 4;
    double seconds = best_of(reps, [&] {
      parallel([&](std::size_t t) {
        float* out = to[t].data();
        const float* in = from[t].data();
        for (std::size_t r = 0; r < repeats; ++r)
          stream_scale(out, in, floats);
      });
    });
    const auto moved = static_cast<int64_t>(2 * per_thread) * threads;
    const double rate = static_cast<double>(moved) * static_cast<double>(repeats) / seconds;
    peak.bandwidth_by_bytes.emplace_back(moved, rate);
  }
  peak.finish_curve();
  // FLOP/s: each thread one single-threaded f32 GEMM of 512³ through the GEMM bridge, as the
  // CPU backend runs its GEMMs.
  constexpr int64_t n = 512;
  std::vector<std::vector<float>> a(static_cast<std::size_t>(threads)),
      c(static_cast<std::size_t>(threads));
  parallel([&](std::size_t t) {
    a[t].assign(static_cast<std::size_t>(n * n), 0.5f);
    c[t].assign(static_cast<std::size_t>(n * n), 0.0f);
  });
  kernels::GemmShape shape{.m = n, .n = n, .k = n};
  double gemm_seconds = best_of(12, [&] {
    parallel([&](std::size_t t) {
      kernels::gemm(DType::f32, shape, a[t].data(), a[t].data(), c[t].data());
    });
  });
  peak.flops_per_second =
      2.0 * static_cast<double>(n * n * n) * static_cast<double>(threads) / gemm_seconds;
  char how[200];
  std::snprintf(
      how, sizeof how,
      "cpu, %lld threads: a streaming scale over 16 KiB to 64 MiB per thread, f32 GEMM 512^3 per "
      "thread (best of several)",
      static_cast<long long>(threads));
  peak.how = how;
  return peak;
}

namespace {

std::string percent(double share) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", share * 100);
  return text;
}

Summary Profiler::finish() {
  stop_sampler();
  std::lock_guard lock(mutex_);
  Summary s;
  s.dir = dir_;
  s.peak = peak_;
  s.loader_threads = loader_threads_;
  s.compiles = static_cast<int64_t>(compiles_.size());

  // Phases: the mean over counted steps (past the warm-up, no compile inside).
  PhaseTimes& ph = s.phases;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    const StepRecord& r = steps_[i];
    if (static_cast<int64_t>(i) < options_.skip_steps || r.compiled) {
      ++s.skipped;
      continue;
    }
    ++s.steps;
    auto sec = [](int64_t ns) { return static_cast<double>(ns) * 1e-9; };
    ph.data += sec(r.data);
    ph.copies += sec(r.copies);
    ph.forward += sec(r.role[static_cast<std::size_t>(Role::forward)]);
    ph.teacher += sec(r.role[static_cast<std::size_t>(Role::teacher)]);
    ph.backward += sec(r.role[static_cast<std::size_t>(Role::backward)]);
    ph.optimizer += sec(r.role[static_cast<std::size_t>(Role::optimizer)]);
    ph.collectives += sec(r.role[static_cast<std::size_t>(Role::collective)]);
    ph.other_programs += sec(r.other);
    ph.step += sec(r.end - r.period_begin);
    s.device_reads += static_cast<double>(r.reads);
    s.device_read_seconds += sec(r.read_ns);
  }
  if (s.steps > 0) {
    auto n = static_cast<double>(s.steps);
    for (double* v : {&ph.data, &ph.copies, &ph.forward, &ph.teacher, &ph.backward, &ph.optimizer,
                      &ph.collectives, &ph.other_programs, &ph.step})
      *v /= n;
    s.device_reads /= n;
    s.device_read_seconds /= n;
    ph.host = std::max(0.0, ph.step - ph.data - ph.copies - ph.forward - ph.teacher - ph.backward -
                                ph.optimizer - ph.collectives - ph.other_programs);
  }

  // A GEMM of the program that ran faster than the probe proves the device can: the probe
  // shared the cores (a loader filling its queue at the start, say). The peak is then raised to
  // that GEMM's mean rate, so no share exceeds 100%.
  double fastest_gemm = 0;
  for (const auto& [id, p] : programs_)
    for (std::size_t k = 0; k < p.kernels.size(); ++k)
      if (p.calls[k] > 0 && p.kernels[k].gemm && p.total_ns[k] > 0)
        fastest_gemm = std::max(fastest_gemm, static_cast<double>(p.kernels[k].flops) *
                                                  static_cast<double>(p.calls[k]) /
                                                  (static_cast<double>(p.total_ns[k]) * 1e-9));
  if (fastest_gemm > s.peak.flops_per_second) {
    char raised[160];
    std::snprintf(raised, sizeof raised,
                  "; FLOP/s raised from the probe's %.1f to the fastest GEMM's %.1f GFLOP/s",
                  s.peak.flops_per_second * 1e-9, fastest_gemm * 1e-9);
    s.peak.how += raised;
    s.peak.flops_per_second = fastest_gemm;
  }

  // Kernels, with their place on the roofline.
  double kernel_total = 0, gemm_total = 0;
  int64_t gemm_kernels = 0;
  double gemm_flops = 0;
  std::map<std::string, double> by_module;
  for (const auto& [id, p] : programs_)
    for (std::size_t k = 0; k < p.kernels.size(); ++k) {
      if (p.calls[k] == 0) continue;
      KernelRow row;
      row.info = p.kernels[k];
      row.program = p.label;
      row.calls = p.calls[k];
      row.seconds = static_cast<double>(p.total_ns[k]) * 1e-9;
      const double per_call = row.seconds / static_cast<double>(row.calls);
      const double intensity = row.info.bytes > 0 ? static_cast<double>(row.info.flops) /
                                                        static_cast<double>(row.info.bytes)
                                                  : 1e30;
      const double bandwidth = s.peak.bandwidth_for(row.info.bytes);
      row.memory_bound = intensity < s.peak.flops_per_second / bandwidth;
      if (per_call > 0)
        row.achieved = row.memory_bound ? static_cast<double>(row.info.bytes) / per_call / bandwidth
                                        : static_cast<double>(row.info.flops) / per_call /
                                              s.peak.flops_per_second;
      kernel_total += row.seconds;
      if (row.info.gemm) {
        gemm_total += row.seconds;
        ++gemm_kernels;
        gemm_flops += static_cast<double>(row.info.flops) * static_cast<double>(row.calls);
      }
      by_module[row.info.path.empty() ? "(top level)" : row.info.path] += row.seconds;
      s.kernels.push_back(std::move(row));
    }
  for (KernelRow& row : s.kernels)
    row.share = kernel_total > 0 ? row.seconds / kernel_total : 0;
  std::sort(s.kernels.begin(), s.kernels.end(),
            [](const KernelRow& a, const KernelRow& b) { return a.seconds > b.seconds; });
  s.modules.assign(by_module.begin(), by_module.end());
  std::sort(s.modules.begin(), s.modules.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });

  // Per-core CPU use.
  for (const auto& [ts, busy] : cpu_samples_) {
    if (s.cpu_use.size() < busy.size()) s.cpu_use.resize(busy.size(), 0.0);
    for (std::size_t c = 0; c < busy.size(); ++c)
      s.cpu_use[c] += busy[c] / static_cast<double>(cpu_samples_.size());
  }

  // Verdicts, each with the number it rests on and what to do.
  auto say = [&](std::string kind, double value, std::string line) {
    s.verdicts.push_back({std::move(kind), value, std::move(line)});
  };
  if (s.steps > 0 && ph.step > 0) {
    // Under 50 µs per step the wait is the hand-over between threads, not the loader's pace.
    double data = ph.data / ph.step;
    if (data >= 0.10 && ph.data >= 50e-6) {
      std::string action =
          s.loader_threads < 0 ? "prefetch batches on more threads"
          : s.loader_threads == 0
              ? "read batches ahead: raise --loader-threads above 0 (now 0: each batch is read "
                "inside the loop)"
              : "raise --loader-threads (now " + std::to_string(s.loader_threads) + ")";
      say("input-bound", data,
          "input-bound: " + percent(data) + " of the step waiting for data — " + action);
    }
    double host = ph.host / ph.step;
    if (host >= 0.25) {
      double per_step_kernels = 0;
      for (const KernelRow& row : s.kernels)
        per_step_kernels += static_cast<double>(row.calls);
      per_step_kernels /= static_cast<double>(s.steps);
      char line[320];
      std::snprintf(line, sizeof line,
                    "host-bound: %s of the step outside kernels and data (%.0f kernel launches "
                    "per step, %.1f ms of host work) — give the kernels more work per launch: "
                    "a larger --batch-size, or fewer calls between steps",
                    percent(host).c_str(), per_step_kernels, ph.host * 1e3);
      say("host-bound", host, line);
    }
    // Reading a GPU result makes the host wait for the step that made it: while it waits it
    // queues nothing, so the GPU idles between steps. (A profiled GPU step waits for its
    // events anyway, so the time shown is what is left after that wait.)
    if (s.device_reads >= 0.5) {
      char line[400];
      std::snprintf(line, sizeof line,
                    "host-syncs: the loop read %.1f device results per step (%.2f ms per step "
                    "in the reads) — each read waits for the GPU to finish the step, so the "
                    "host cannot queue the next one meanwhile: read the loss every few steps "
                    "(a LossHandle keeps it until read)",
                    s.device_reads, s.device_read_seconds * 1e3);
      say("host-syncs", s.device_reads, line);
    }
  }
  if (kernel_total > 0 && gemm_total / kernel_total >= 0.5) {
    double rate = gemm_flops / gemm_total / s.peak.flops_per_second;
    char line[320];
    std::snprintf(line, sizeof line,
                  "GEMM-bound: %s of kernel time in %lld GEMMs, at %s of the measured peak "
                  "FLOP/s — the math itself dominates: a lower precision (--amp bf16 on a GPU) "
                  "or larger GEMMs (a larger --batch-size) raise the rate",
                  percent(gemm_total / kernel_total).c_str(), static_cast<long long>(gemm_kernels),
                  percent(rate).c_str());
    say("gemm-bound", gemm_total / kernel_total, line);
  }
  for (const KernelRow& row : s.kernels) {
    if (row.share < 0.05) break;
    if (row.info.gemm || !row.memory_bound || row.achieved >= 0.6) continue;
    double per_call = row.seconds / static_cast<double>(row.calls);
    char line[480];
    std::snprintf(
        line, sizeof line,
        "memory-bound: %s (%s) takes %s of kernel time at %s of the measured "
        "bandwidth (%.1f of %.1f GB/s, %.2f MB per call) — it waits on memory: "
        "fewer bytes (a narrower dtype, --amp) or a layout read in order would help",
        row.info.name.c_str(), role_name(row.info.role), percent(row.share).c_str(),
        percent(row.achieved).c_str(), static_cast<double>(row.info.bytes) / per_call * 1e-9,
        s.peak.bandwidth_for(row.info.bytes) * 1e-9, static_cast<double>(row.info.bytes) * 1e-6);
    say("memory-bound", row.achieved, line);
    break;
  }
  if (!recompiles_.empty()) {
    // Shape buckets name theirs in the reason: one program per bucket is what they promise.
    bool bucketed = std::all_of(recompiles_.begin(), recompiles_.end(), [](const std::string& r) {
      return r.find("(shape bucket ") != std::string::npos;
    });
    say("recompiles", static_cast<double>(recompiles_.size()),
        "recompiled " + std::to_string(recompiles_.size()) + "×: " + recompiles_.back() +
            (bucketed ? " — one program per shape bucket, each compiled once: fewer buckets "
                        "compile less, more buckets pad less"
                      : " — a dimension that varies compiles a program per value: pad it to a "
                        "few sizes (shape buckets: StepOptions::buckets, gpt's "
                        "--variable-length)"));
  }

  closed_ = true;
  std::string trace = trace_json(s);
  events_.clear();
  events_.shrink_to_fit();
  write_file_atomically(dir_ / "summary.txt", s.text());
  write_file_atomically(dir_ / "trace.json", trace);
  write_file_atomically(dir_ / "report.html", report_html(s));
  return s;
}

std::string Profiler::trace_json(const Summary& summary) const {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  auto us = [](int64_t ns) { // a duration in microseconds
    char text[32];
    std::snprintf(text, sizeof text, "%.3f", static_cast<double>(ns) * 1e-3);
    return std::string(text);
  };
  auto at = [&](int64_t ns) { return us(ns - start_); }; // a time from the profile's start
  bool first = true;
  auto event = [&](std::string_view name, std::string_view cat, uint32_t tid, int64_t begin,
                   int64_t end, const std::string& args) {
    out += first ? "" : ",\n";
    first = false;
    out += "{\"name\":";
    json::append_quoted(out, name);
    out += ",\"cat\":\"" + std::string(cat) +
           "\",\"ph\":\"X\",\"pid\":1,\"tid\":" + std::to_string(tid) + ",\"ts\":" + at(begin) +
           ",\"dur\":" + us(end - begin) + ",\"args\":{" + args + "}}";
  };
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"sinter\"}}";
  first = false;
  for (std::size_t t = 0; t < thread_names_.size(); ++t) {
    out += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" + std::to_string(t + 1) +
           ",\"args\":{\"name\":";
    json::append_quoted(out, thread_names_[t]);
    out += "}}";
  }
  // Phase spans: runs of consecutive kernels of one role inside a traced run.
  struct Open {
    bool open = false;
    Role role{};
    int64_t begin = 0, end = 0;
    uint32_t tid = 0;
  } phase;
  auto close_phase = [&] {
    if (phase.open) event(role_name(phase.role), "phase", phase.tid, phase.begin, phase.end, "");
    phase.open = false;
  };
  for (const Event& e : events_) {
    switch (e.category) {
    case Category::step:
      event("step " + std::to_string(e.index), "step", e.tid, e.begin, e.end, "");
      break;
    case Category::data: event("waiting for data", "data", e.tid, e.begin, e.end, ""); break;
    case Category::fill:
      event("fill batch", "loader", e.tid, e.begin, e.end, "\"batch\":" + std::to_string(e.index));
      break;
    case Category::compile:
      event("compile " + compile_labels_[static_cast<std::size_t>(e.index)], "compile", e.tid,
            e.begin, e.end, "");
      break;
    case Category::run: {
      close_phase();
      const Program& p = programs_.at(e.program);
      event(p.label, "run", e.tid, e.begin, e.end, "");
      break;
    }
    case Category::kernel: {
      const KernelInfo& k = programs_.at(e.program).kernels[static_cast<std::size_t>(e.index)];
      if (!phase.open || phase.role != k.role || phase.tid != e.tid) {
        close_phase();
        phase = {true, k.role, e.begin, e.end, e.tid};
      }
      phase.end = e.end;
      std::string args = "\"path\":";
      json::append_quoted(args, k.path);
      args += ",\"role\":\"" + std::string(role_name(k.role)) + "\",\"kind\":\"" + k.kind +
              "\",\"bytes\":" + std::to_string(k.bytes) + ",\"flops\":" + std::to_string(k.flops);
      event(k.name, "kernel", e.tid, e.begin, e.end, args);
      break;
    }
    }
  }
  close_phase();
  for (const auto& [ts, busy] : cpu_samples_) {
    out += ",\n{\"name\":\"cpu use\",\"ph\":\"C\",\"pid\":1,\"ts\":" + at(ts) + ",\"args\":{";
    for (std::size_t c = 0; c < busy.size(); ++c) {
      char value[48];
      std::snprintf(value, sizeof value, "%s\"cpu%zu\":%.1f", c ? "," : "", c, busy[c] * 100);
      out += value;
    }
    out += "}}";
  }
  char meta[256];
  std::snprintf(meta, sizeof meta,
                "\n],\"otherData\":{\"steps\":%lld,\"peak_bytes_per_second\":%.0f,"
                "\"peak_flops_per_second\":%.0f}}\n",
                static_cast<long long>(summary.steps), summary.peak.bytes_per_second,
                summary.peak.flops_per_second);
  out += meta;
  return out;
}

void stop_at_exit() {
  try {
    if (active()) stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sinter: the profile could not be written: %s\n", e.what());
  }
}

} // namespace

std::vector<std::pair<const char*, double>> PhaseTimes::parts() const {
  return {{"data", data},
          {"copies", copies},
          {"forward", forward},
          {"teacher", teacher},
          {"backward", backward},
          {"optimizer", optimizer},
          {"collectives", collectives},
          {"other programs", other_programs},
          {"host", host}};
}

double DevicePeak::bandwidth_for(int64_t bytes) const {
  for (const auto& [working_set, rate] : bandwidth_by_bytes)
    if (bytes <= working_set) return rate;
  return bandwidth_by_bytes.empty() ? bytes_per_second : bandwidth_by_bytes.back().second;
}

std::string Summary::text() const {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "sinter profile: %lld steps (%lld left out: warm-up or compiles), %.2f ms per "
                "step, %lld compiles → %s\n",
                static_cast<long long>(steps), static_cast<long long>(skipped), phases.step * 1e3,
                static_cast<long long>(compiles), dir.string().c_str());
  out += line;
  if (steps > 0) {
    out += "  phases:";
    for (const auto& [name, seconds] : phases.parts()) {
      if (seconds <= 0 && std::string_view(name) != "host") continue;
      std::snprintf(line, sizeof line, " %s %.2f ms (%s),", name, seconds * 1e3,
                    percent(phases.step > 0 ? seconds / phases.step : 0).c_str());
      out += line;
    }
    out.back() = '\n';
  }
  std::snprintf(line, sizeof line,
                "  device peak: %.1f GB/s in caches, %.1f GB/s from memory, %.1f GFLOP/s (%s)\n",
                peak.bytes_per_second * 1e-9,
                (peak.bandwidth_by_bytes.empty() ? 0.0 : peak.bandwidth_by_bytes.back().second) *
                    1e-9,
                peak.flops_per_second * 1e-9, peak.how.c_str());
  out += line;
  if (!peak.bandwidth_by_bytes.empty()) {
    out += "  bandwidth by bytes per call:";
    for (const auto& [bytes, rate] : peak.bandwidth_by_bytes) {
      std::snprintf(line, sizeof line, " %s %.1f GB/s,", format_bytes(bytes).c_str(), rate * 1e-9);
      out += line;
    }
    out.back() = '\n';
  }
  if (!cpu_use.empty()) {
    out += "  cpu use per core:";
    for (double c : cpu_use)
      out += " " + percent(c);
    out += "\n";
  }
  out += "  top kernels:\n";
  for (std::size_t i = 0; i < kernels.size() && i < 8; ++i) {
    const KernelRow& k = kernels[i];
    std::snprintf(line, sizeof line, "    %5.1f%%  %8.3f ms/call  %-9s %s of %s peak  %s [%s]\n",
                  k.share * 100, k.seconds / static_cast<double>(k.calls) * 1e3,
                  role_name(k.info.role), percent(k.achieved).c_str(),
                  k.memory_bound ? "bandwidth" : "FLOP/s", k.info.name.c_str(), k.program.c_str());
    out += line;
  }
  if (verdicts.empty()) out += "  verdict: balanced — no phase or kernel stands out\n";
  for (const Verdict& v : verdicts)
    out += "  verdict: " + v.line + "\n";
  return out;
}

void start(const std::filesystem::path& dir, Options options) {
  std::lock_guard lock(g_lifecycle);
  if (g_profiler.load()) throw std::logic_error("sinter: a profile is already running");
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error || !std::filesystem::is_directory(dir))
    throw std::runtime_error("sinter: cannot create the profile directory " + dir.string() + ": " +
                             (error ? error.message() : "it is not a directory") +
                             " — name a writable directory (--profile DIR / SINTER_PROFILE)");
  g_profiler.store(new Profiler(dir, options));
}

bool active() { return g_profiler.load(std::memory_order_relaxed) != nullptr; }

Summary stop() {
  std::lock_guard lock(g_lifecycle);
  Profiler* profiler = g_profiler.exchange(nullptr);
  if (!profiler) throw std::logic_error("sinter: no profile is running");
  // A loader thread may have loaded the pointer just before: the stopped profiler is kept
  // (closed, its buffers freed) for the rest of the process instead of deleted.
  static std::vector<std::unique_ptr<Profiler>> stopped;
  stopped.emplace_back(profiler);
  Summary s = profiler->finish();
  if (profiler->prints()) std::fputs(s.text().c_str(), stderr);
  return s;
}

void start_from_environment() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* dir = setting("SINTER_PROFILE");
    if (!dir || !*dir || active()) return;
    start_until_exit(dir);
  });
}

void start_until_exit(const std::filesystem::path& dir, Options options) {
  start(dir, options);
  std::atexit(stop_at_exit);
}

uint64_t new_program_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

ProgramRun::ProgramRun(uint64_t program, std::string_view label,
                       const std::function<std::vector<KernelInfo>()>& describe,
                       const std::function<DevicePeak()>& device_peak) {
  Profiler* p = g_profiler.load(std::memory_order_acquire);
  if (!p) return;
  if (!p->knows(program)) p->add_program(program, label, describe(), device_peak);
  on_ = true;
  program_ = program;
  run_begin_ = now_ns();
  times_.reserve(64);
}

ProgramRun::~ProgramRun() {
  if (!on_) return;
  if (Profiler* p = g_profiler.load(std::memory_order_acquire))
    p->finish_run(program_, run_begin_, copies_ns_, times_, track_);
}

void ProgramRun::copies(int64_t begin, int64_t end) {
  if (on_) copies_ns_ += end - begin;
}

StepScope::StepScope() {
  if (Profiler* p = g_profiler.load(std::memory_order_acquire)) {
    p->step_begin();
    on_ = true;
  }
}

StepScope::~StepScope() {
  if (!on_) return;
  if (Profiler* p = g_profiler.load(std::memory_order_acquire)) p->step_end();
}

void device_read(int64_t begin, int64_t end) {
  if (Profiler* p = g_profiler.load(std::memory_order_acquire)) p->device_read(begin, end);
}

void data_wait(int64_t begin, int64_t end) {
  if (Profiler* p = g_profiler.load(std::memory_order_acquire)) p->data_wait(begin, end);
}

void loader_fill(int64_t begin, int64_t end, int64_t batch) {
  if (Profiler* p = g_profiler.load(std::memory_order_acquire)) p->loader_fill(begin, end, batch);
}

void loader_threads(int threads) {
  if (Profiler* p = g_profiler.load(std::memory_order_acquire)) p->loader_threads(threads);
}

void compiled(std::string_view label, int64_t begin, int64_t end) {
  if (Profiler* p = g_profiler.load(std::memory_order_acquire)) p->compiled(label, begin, end);
}

void recompiled(std::string_view reason) {
  if (Profiler* p = g_profiler.load(std::memory_order_acquire)) p->recompiled(reason);
}

} // namespace sinter::profile
