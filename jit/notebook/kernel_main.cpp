// jit/notebook/kernel_main.cpp — sinter-kernel: a Jupyter kernel (xeus) whose cells are C++ run by
// clang's incremental interpreter with sinter loaded
#include "jit/notebook/cell_interpreter.hpp"
#include "jit/notebook/display.hpp"
#include "jit/notebook/install_layout.hpp"
#include "jit/notebook/plot_svg.hpp"
#include "jit/notebook/tensor_display.hpp"
#include "jit/runtime/interrupt.hpp"
#include "jit/settings.hpp"

#include <xeus/xeus_context.hpp>
#include <xeus/xhelper.hpp>
#include <xeus/xinterpreter.hpp>
#include <xeus/xkernel.hpp>
#include <xeus/xkernel_configuration.hpp>
#include <xeus/xserver_zmq.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <mutex>
#include <optional>
#include <poll.h>
#include <pthread.h>
#include <string>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace nl = nlohmann;

namespace sinter::notebook {
namespace {

/// A value a cell showed (display(x), or its trailing expression), waiting for the shell
/// thread to publish it.
struct Shown {
  std::string text, html, svg;
  bool as_result = false;
  int display_id = -1;   // ≥ 0: a display shown in place (a progress bar)
  bool replaces = false; // replaces display `display_id` (update_display_data)
};
std::mutex shown_mutex;
std::vector<Shown> shown_queue;

void queue_shown(Shown shown) {
  // What the cell printed before it must reach the notebook first: out of stdio's buffers now.
  std::fflush(stdout);
  std::fflush(stderr);
  std::lock_guard lock(shown_mutex);
  shown_queue.push_back(std::move(shown));
}

std::vector<Shown> take_shown() {
  std::lock_guard lock(shown_mutex);
  return std::exchange(shown_queue, {});
}

/// A crash in a cell: the signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) that stopped the
/// thread it hit, or 0. The thread sleeps in the handler; the shell thread reports the crash as
/// the cell's error and the kernel exits, for Jupyter to restart it.
std::atomic<int> crash_signal{0};
pid_t main_thread_id = 0;
/// Whether a cell is running: a crash outside one has no cell to report it to.
std::atomic<bool> cell_running{false};

extern "C" void on_crash(int signal) {
  // The thread serving Jupyter cannot report its own crash, and a crash between cells has no
  // cell to report it: say so in the kernel's log and die as the signal would have.
  if (static_cast<pid_t>(::syscall(SYS_gettid)) == main_thread_id || !cell_running) {
    constexpr char message[] = "sinter-kernel: crashed outside a cell (a fatal signal)\n";
    ssize_t ignored = ::write(2, message, sizeof message - 1);
    (void)ignored;
    ::signal(signal, SIG_DFL);
    ::raise(signal);
    return;
  }
  int none = 0;
  crash_signal.compare_exchange_strong(none, signal);
  ::alarm(10); // should reporting hang on a lock the crash left held, SIGALRM ends the kernel
  for (;;)
    ::pause();
}

std::string crash_message(int signal) {
  const char* name = signal == SIGSEGV   ? "SIGSEGV (segmentation fault: a bad or null pointer, "
                                           "a use after free, an index out of range, or a stack "
                                           "overflow)"
                     : signal == SIGBUS  ? "SIGBUS (bus error: a bad memory access)"
                     : signal == SIGFPE  ? "SIGFPE (an integer division by zero)"
                     : signal == SIGILL  ? "SIGILL (an illegal instruction)"
                     : signal == SIGABRT ? "SIGABRT (abort: a failed assert, std::terminate, or a "
                                           "C++ exception thrown where none may be)"
                                         : "a fatal signal";
  return std::string("the cell crashed with ") + name +
         ". The kernel exits and Jupyter restarts it: every definition and variable of this "
         "session is lost. What the cell printed before the crash is above.";
}

void install_crash_handlers() {
  main_thread_id = static_cast<pid_t>(::syscall(SYS_gettid));
  struct sigaction on_fatal{};
  on_fatal.sa_handler = on_crash;
  on_fatal.sa_flags = SA_ONSTACK; // a stack overflow leaves no stack but the alternate one
  sigemptyset(&on_fatal.sa_mask);
  for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    sigaction(signal, &on_fatal, nullptr);
}

/// Runs jobs one at a time on one long-lived thread, so every cell sees the same thread (its
/// thread-locals, its stack) while the shell thread stays free to forward the cell's output.
class CellThread {
public:
  CellThread() : thread_([this] { loop(); }) {}
  ~CellThread() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  /// Starts `job`; finished() turns true when it has returned.
  void start(std::function<void()> job) {
    std::lock_guard lock(mutex_);
    job_ = std::move(job);
    done_ = false;
    wake_.notify_all();
  }
  bool finished() const { return done_.load(); }
  /// Waits until the job started last has returned.
  void wait() const {
    while (!finished())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

private:
  void loop() {
    // A cell that recurses without end overflows this thread's stack: the crash handler then
    // runs on this one.
    static thread_local std::vector<char> alternate_stack(1 << 16);
    stack_t alternate{};
    alternate.ss_sp = alternate_stack.data();
    alternate.ss_size = alternate_stack.size();
    ::sigaltstack(&alternate, nullptr);
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || job_; });
      if (stopping_) return;
      std::function<void()> job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      job();
      done_ = true;
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::function<void()> job_;
  bool stopping_ = false;
  std::atomic<bool> done_{true};
  std::thread thread_;
};

/// While alive, file descriptors 1 and 2 write into pipes that pump() reads: C stdio, iostreams
/// and sinter's own progress lines all reach the notebook.
class OutputCapture {
public:
  OutputCapture() {
    std::fflush(stdout);
    std::fflush(stderr);
    for (int fd : {1, 2}) {
      int ends[2];
      if (::pipe2(ends, O_CLOEXEC) != 0) throw std::runtime_error("sinter-kernel: pipe failed");
      Stream& s = streams_[fd - 1];
      s.read = ends[0];
      s.saved = ::dup(fd);
      ::dup2(ends[1], fd);
      ::close(ends[1]);
    }
  }
  ~OutputCapture() {
    restore();
    for (Stream& s : streams_)
      if (s.read >= 0) ::close(s.read);
  }

  /// Forwards what has arrived (waiting up to `timeout_ms`) to `publish(name, text)`.
  void pump(int timeout_ms, const std::function<void(const char*, const std::string&)>& publish) {
    pollfd fds[2] = {{streams_[0].read, POLLIN, 0}, {streams_[1].read, POLLIN, 0}};
    if (::poll(fds, 2, timeout_ms) <= 0) return;
    for (int i = 0; i < 2; ++i)
      if (fds[i].revents & (POLLIN | POLLHUP)) {
        char buffer[8192];
        ssize_t n = ::read(streams_[i].read, buffer, sizeof buffer);
        if (n > 0)
          publish(i == 0 ? "stdout" : "stderr", std::string(buffer, static_cast<std::size_t>(n)));
      }
  }
  /// Puts the original descriptors back; what is still in the pipes is forwarded first.
  void finish(const std::function<void(const char*, const std::string&)>& publish) {
    std::fflush(stdout);
    std::fflush(stderr);
    restore();
    for (int i = 0; i < 2; ++i) {
      char buffer[8192];
      ssize_t n;
      while ((n = ::read(streams_[i].read, buffer, sizeof buffer)) > 0)
        publish(i == 0 ? "stdout" : "stderr", std::string(buffer, static_cast<std::size_t>(n)));
    }
  }

private:
  struct Stream {
    int read = -1, saved = -1;
  };
  void restore() {
    for (int fd : {1, 2}) {
      Stream& s = streams_[fd - 1];
      if (s.saved >= 0) {
        ::dup2(s.saved, fd); // closes the pipe's write end: the reader sees its end
        ::close(s.saved);
        s.saved = -1;
      }
    }
  }
  Stream streams_[2];
};

class KernelInterpreter final : public xeus::xinterpreter {
public:
  explicit KernelInterpreter(CellInterpreterOptions options) : options_(std::move(options)) {}

private:
  void configure_impl() override {
    // The DSL is included on the cell thread at once; the first cell waits for it.
    cells_.start([this] {
      try {
        interpreter_ = std::make_unique<CellInterpreter>(options_);
      } catch (const std::exception& e) {
        startup_error_ = e.what();
      }
    });
  }

  nl::json execute_request_impl(int execution_counter, const std::string& code, bool silent,
                                bool /*store_history*/, nl::json /*user_expressions*/,
                                bool /*allow_stdin*/) override {
    auto publish = [&](const char* name, const std::string& text) {
      if (!silent) publish_stream(name, text);
    };
    cells_.wait(); // the start-up include
    if (!interpreter_) return error_reply("kernel start-up failed", startup_error_);
    clear_interrupt(); // an interrupt sent while the kernel was idle is not this cell's
    CellResult result;
    std::optional<Shown> cell_result;
    // Shown values go out in order with the streams: what is in the pipes first.
    auto publish_shown = [&](OutputCapture& capture) {
      std::vector<Shown> shown = take_shown();
      if (shown.empty()) return;
      capture.pump(0, publish);
      for (std::size_t i = 0; i < shown.size(); ++i) {
        Shown& v = shown[i];
        if (v.as_result) {
          cell_result = std::move(v);
          continue;
        }
        if (silent) continue;
        if (v.display_id < 0) {
          display_data(mime_bundle(v), nl::json::object(), nl::json::object());
          continue;
        }
        // An in-place display updated again before it was published: only the newest counts.
        bool newer_follows =
            v.replaces && std::any_of(shown.begin() + i + 1, shown.end(), [&](const Shown& later) {
              return later.replaces && later.display_id == v.display_id;
            });
        if (newer_follows) continue;
        nl::json transient;
        transient["display_id"] = "sinter-" + std::to_string(v.display_id);
        if (v.replaces)
          update_display_data(mime_bundle(v), nl::json::object(), transient);
        else
          display_data(mime_bundle(v), nl::json::object(), transient);
      }
    };
    {
      OutputCapture capture;
      cell_running = true;
      cells_.start([&] {
        result = interpreter_->run(code);
        cell_running = false;
      });
      while (!cells_.finished() && crash_signal == 0) {
        capture.pump(20, publish);
        publish_shown(capture);
      }
      capture.finish(publish);
      publish_shown(capture);
    }
    if (int signal = crash_signal.load()) {
      std::string message = crash_message(signal);
      std::fprintf(stderr, "sinter-kernel: %s\n", message.c_str());
      // Exit once the reply is out; Jupyter sees the kernel die and restarts it.
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        std::_Exit(70);
      }).detach();
      return error_reply("crash", message);
    }
    if (!result.ok) return error_reply(result.error_name, result.message);
    if (cell_result && !silent)
      publish_execution_result(execution_counter, mime_bundle(*cell_result), nl::json::object());
    nl::json reply;
    reply["status"] = "ok";
    reply["payload"] = nl::json::array();
    reply["user_expressions"] = nl::json::object();
    return reply;
  }

  static nl::json mime_bundle(const Shown& shown) {
    nl::json data;
    data["text/plain"] = shown.text;
    if (!shown.html.empty()) data["text/html"] = shown.html;
    if (!shown.svg.empty()) data["image/svg+xml"] = shown.svg;
    return data;
  }

  nl::json error_reply(const std::string& name, const std::string& value) {
    std::vector<std::string> traceback{name + ": " + value};
    publish_execution_error(name, value, traceback);
    nl::json reply;
    reply["status"] = "error";
    reply["ename"] = name;
    reply["evalue"] = value;
    reply["traceback"] = traceback;
    return reply;
  }

  /// Runs `job` on the cell thread (where the interpreter lives) once it is free, and waits.
  /// Jupyter sends completion and inspection between cells: the shell thread that receives
  /// them is the one a running cell keeps busy.
  template <class Job> void on_cell_thread(Job job) {
    cells_.wait();
    cells_.start(std::move(job));
    cells_.wait();
  }

  nl::json complete_request_impl(const std::string& code, int cursor_pos) override {
    CellInterpreter::Completion completion;
    std::size_t cursor = byte_offset(code, cursor_pos);
    completion.start = cursor;
    on_cell_thread([&] {
      if (interpreter_) completion = interpreter_->complete(code, cursor);
    });
    nl::json reply;
    reply["status"] = "ok";
    reply["matches"] = completion.matches;
    reply["cursor_start"] = code_points(code, completion.start);
    reply["cursor_end"] = cursor_pos;
    reply["metadata"] = nl::json::object();
    return reply;
  }

  nl::json inspect_request_impl(const std::string& code, int cursor_pos,
                                int /*detail_level*/) override {
    std::string text;
    on_cell_thread([&] {
      if (interpreter_) text = interpreter_->inspect(code, byte_offset(code, cursor_pos));
    });
    nl::json reply;
    reply["status"] = "ok";
    reply["found"] = !text.empty();
    reply["data"] = nl::json::object();
    if (!text.empty()) reply["data"]["text/plain"] = text;
    reply["metadata"] = nl::json::object();
    return reply;
  }

  /// Jupyter counts cursor positions in Unicode code points; the code is UTF-8.
  static std::size_t byte_offset(const std::string& code, int code_point) {
    std::size_t byte = 0;
    for (int n = 0; byte < code.size() && n < code_point; ++n)
      do
        ++byte;
      while (byte < code.size() && (static_cast<unsigned char>(code[byte]) & 0xC0) == 0x80);
    return byte;
  }
  static int code_points(const std::string& code, std::size_t bytes) {
    int n = 0;
    for (std::size_t i = 0; i < bytes && i < code.size(); ++i)
      n += (static_cast<unsigned char>(code[i]) & 0xC0) != 0x80;
    return n;
  }

  nl::json is_complete_request_impl(const std::string&) override {
    nl::json reply;
    reply["status"] = "complete";
    return reply;
  }

  nl::json kernel_info_request_impl() override {
    nl::json info;
    info["status"] = "ok";
    info["implementation"] = "sinter";
    info["implementation_version"] = SINTER_VERSION;
    info["banner"] = "sinter " SINTER_VERSION ": C++20 cells on clang-repl, with dsl/sinter.hpp";
    nl::json language;
    language["name"] = "c++";
    language["version"] = "20";
    language["mimetype"] = "text/x-c++src";
    language["file_extension"] = ".cpp";
    language["codemirror_mode"] = "text/x-c++src";
    info["language_info"] = language;
    return info;
  }

  void shutdown_request_impl() override {}

  CellInterpreterOptions options_;
  std::unique_ptr<CellInterpreter> interpreter_;
  std::string startup_error_;
  CellThread cells_; // declared last: joined first, before the interpreter goes
};

} // namespace
} // namespace sinter::notebook

// The cells' way to the notebook (declared in jit/notebook/display.hpp; the executable exports
// them so the interpreter's code links against them).
extern "C" void sinter_notebook_show_text(const char* text, const char* html, bool as_result) {
  sinter::notebook::queue_shown({.text = text, .html = html, .as_result = as_result});
}

extern "C" void sinter_notebook_show_tensor(const sinter::HostTensor* tensor, bool as_result) {
  sinter::notebook::queue_shown({.text = sinter::notebook::tensor_text(*tensor),
                                 .html = sinter::notebook::tensor_html(*tensor),
                                 .as_result = as_result});
}

extern "C" void sinter_notebook_show_plot(const sinter::notebook::LinePlot* plot, bool as_result) {
  sinter::notebook::queue_shown({.text = sinter::notebook::line_plot_text(*plot),
                                 .svg = sinter::notebook::line_plot_svg(*plot),
                                 .as_result = as_result});
}

extern "C" int sinter_notebook_show_in_place(int id, const char* text, const char* html) {
  static std::atomic<int> next_id{0};
  bool replaces = id >= 0;
  if (!replaces) id = next_id++;
  sinter::notebook::queue_shown(
      {.text = text, .html = html, .display_id = id, .replaces = replaces});
  return id;
}

int main(int argc, char** argv) {
  std::string connection_file, write_prelude, depfile;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "-f") == 0) connection_file = argv[i + 1];
    if (std::strcmp(argv[i], "--write-prelude") == 0) write_prelude = argv[i + 1];
    if (std::strcmp(argv[i], "--depfile") == 0) depfile = argv[i + 1];
  }
  // The build precompiles the prelude (meson.build): `sinter-kernel --write-prelude PATH`.
  sinter::notebook::CellInterpreterOptions options;
  if (write_prelude.empty()) {
    options = sinter::notebook::kernel_options(); // installed: the prefix's (install_layout)
  } else {
    options.source_root = SINTER_SOURCE_ROOT;
    options.library = SINTER_LIBRARY;
  }
  if (!write_prelude.empty()) {
    try {
      sinter::notebook::write_prelude(options, write_prelude, depfile);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  if (connection_file.empty()) {
    std::fprintf(stderr, "usage: sinter-kernel -f CONNECTION_FILE (Jupyter starts it; install "
                         "its kernelspec with `sinter kernel install`)\n");
    return 2;
  }
  // Jupyter interrupts by SIGINT (interrupt_mode "signal"): the cell's next training step
  // throws sinter::Interrupted. The handler only sets a flag. Threads started after the mask
  // below (xeus's, the cells') block SIGINT, so none of their system calls is cut short by it.
  sinter::notebook::install_crash_handlers();
  struct sigaction on_interrupt{};
  on_interrupt.sa_handler = [](int) { sinter::request_interrupt(); };
  on_interrupt.sa_flags = SA_RESTART;
  sigemptyset(&on_interrupt.sa_mask);
  sigaction(SIGINT, &on_interrupt, nullptr);
  // One thread that surely takes it, whatever the libraries started before main().
  std::thread([] {
    for (;;)
      ::pause();
  }).detach();
  sigset_t interrupt;
  sigemptyset(&interrupt);
  sigaddset(&interrupt, SIGINT);
  pthread_sigmask(SIG_BLOCK, &interrupt, nullptr);
  xeus::xconfiguration config = xeus::load_configuration(connection_file);
  auto interpreter = std::make_unique<sinter::notebook::KernelInterpreter>(options);
  xeus::xkernel kernel(config, xeus::get_user_name(), xeus::make_context<zmq::context_t>(),
                       std::move(interpreter), xeus::make_xserver_zmq);
  kernel.start();
  // Cells' static objects live in JIT-ed code whose destructors need the interpreter: leave
  // without running them (the session is over; nothing is left to save).
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(0);
}
