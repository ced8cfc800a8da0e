// jit/profile/profiler.cpp — starting and stopping the profiler, and the hooks that programs,
// steps and loaders call while it runs
#include "jit/profile/recorder.hpp"
#include "jit/settings.hpp"

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

namespace detail {

std::atomic<Profiler*> g_profiler{nullptr};
std::mutex g_lifecycle;

void stop_at_exit() {
  try {
    if (active()) stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sinter: the profile could not be written: %s\n", e.what());
  }
}

} // namespace detail

using namespace detail;

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
