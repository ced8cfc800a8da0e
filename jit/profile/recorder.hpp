// jit/profile/recorder.hpp — the profiler's recorder (events, programs, steps, CPU samples),
// shared by the files that record, summarise and write a profile; not a public header
#pragma once
#include "jit/profile/profiler.hpp"

#include "jit/profile/profiler.hpp"
#include "jit/settings.hpp"

#include "jit/backend/cpu/thread_pool.hpp"
#include "jit/io/atomic_file.hpp"
#include "jit/io/json.hpp"
#include "jit/profile/report.hpp"
#include "jit/runtime/memory_plan.hpp"
#include "kernels/cpu/blas_gemm.hpp"

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

namespace sinter::profile::detail {

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

/// The running profiler, or null.
extern std::atomic<Profiler*> g_profiler;
extern std::mutex g_lifecycle; // start and stop
void stop_at_exit();

} // namespace sinter::profile::detail
