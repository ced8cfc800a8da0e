// jit/dist/communicator.cpp — world detection, MPI collectives with timeouts, a world of one
#include "jit/dist/communicator.hpp"
#include "jit/settings.hpp"

// The C API only: the deprecated C++ bindings are neither used nor warning-free.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

namespace sinter {
namespace {

int environment_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  int parsed = 0;
  auto [end, error] = std::from_chars(value, value + std::strlen(value), parsed);
  if (error != std::errc() || *end != '\0' || parsed < 0)
    throw std::invalid_argument(std::string("sinter: ") + name + "='" + value +
                                "' is not a rank or size (a whole number at least 0)");
  return parsed;
}

const char* op_label(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "max"; }

MPI_Datatype mpi_type(DType type, const char* collective) {
  switch (type) {
  case DType::f32: return MPI_FLOAT;
  case DType::f64: return MPI_DOUBLE;
  case DType::i32: return MPI_INT32_T;
  case DType::i64: return MPI_INT64_T;
  case DType::boolean: return MPI_UINT8_T;
  case DType::bf16:
  case DType::f16: break;
  }
  throw std::invalid_argument(std::string("sinter: ") + collective + " over MPI takes f32, f64, " +
                              "i32, i64 or bool, not " + std::string(dtype_name(type)) +
                              " (reduce f32 master gradients, or cast first)");
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::sum ? MPI_SUM : MPI_MAX; }

/// What this rank is waiting in, as a line ready for write(2): a rank that is stopped by
/// mpirun because another rank died names the collective and step it was in.
char waiting_line[512];
volatile std::sig_atomic_t waiting_length = 0;

extern "C" void say_where_stopped(int signal) {
  if (waiting_length > 0) {
    ssize_t ignored = ::write(2, waiting_line, static_cast<std::size_t>(waiting_length));
    (void)ignored;
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

/// Set once a collective failed: the job is broken, and exiting must abort it (MPI_Finalize
/// would wait for ranks that never come).
bool job_broken = false;

void finalize_at_exit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  if (job_broken) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
}

class MpiCommunicator final : public Communicator {
public:
  explicit MpiCommunicator(const WorldPlace& place) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      // Collectives may come from a communication thread as well as the caller's.
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      std::atexit(finalize_at_exit);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    if (rank_ != place.rank || size_ != place.size)
      throw std::runtime_error("sinter: MPI says rank " + std::to_string(rank_) + " of " +
                               std::to_string(size_) + ", the launcher's environment rank " +
                               std::to_string(place.rank) + " of " + std::to_string(place.size));
    // Arrival board: each rank's count of collectives entered and of its polls while waiting,
    // readable by any rank, so a rank that times out can name the ranks that never arrived and
    // those that arrived but stopped inside the collective.
    MPI_Win_allocate(2 * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, comm_, &board_words_,
                     &board_);
    board_words_[entered_word] = 0;
    board_words_[polls_word] = 0;
    MPI_Win_lock_all(MPI_MODE_NOCHECK, board_);
    std::signal(SIGTERM, say_where_stopped);
    std::signal(SIGINT, say_where_stopped);
  }

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || job_broken) return; // a broken job is aborted at exit, not cleaned up
    MPI_Win_unlock_all(board_);
    MPI_Win_free(&board_);
    MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view transport() const override { return "mpi"; }

  Pending start_all_reduce(const void* send, void* recv, int64_t count, DType type,
                           ReduceOp op) override {
    Call call = begin("all_reduce", count, type, op_label(op));
    return launch(std::move(call), [&](MPI_Request* request) {
      return MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, checked_count(count),
                            mpi_type(type, "all_reduce"), mpi_op(op), comm_, request);
    });
  }

  Pending start_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType type,
                               ReduceOp op) override {
    Call call = begin("reduce_scatter", recv_count, type, op_label(op));
    return launch(std::move(call), [&](MPI_Request* request) {
      return MPI_Ireduce_scatter_block(send, recv, checked_count(recv_count),
                                       mpi_type(type, "reduce_scatter"), mpi_op(op), comm_,
                                       request);
    });
  }

  Pending start_all_gather(const void* send, void* recv, int64_t send_count, DType type) override {
    Call call = begin("all_gather", send_count, type, "");
    return launch(std::move(call), [&](MPI_Request* request) {
      MPI_Datatype t = mpi_type(type, "all_gather");
      return MPI_Iallgather(send, checked_count(send_count), t, recv, checked_count(send_count), t,
                            comm_, request);
    });
  }

  Pending start_broadcast(const void* send, void* recv, int64_t count, DType type,
                          int root) override {
    if (root < 0 || root >= size_)
      throw std::invalid_argument("sinter: broadcast from rank " + std::to_string(root) +
                                  " in a world of " + std::to_string(size_));
    Call call = begin("broadcast", count, type, "");
    if (send != recv && rank_ == root)
      std::memmove(recv, send, static_cast<std::size_t>(count) * dtype_bytes(type));
    return launch(std::move(call), [&](MPI_Request* request) {
      return MPI_Ibcast(recv, checked_count(count), mpi_type(type, "broadcast"), root, comm_,
                        request);
    });
  }

  void barrier() override {
    Call call = begin("barrier", 0, DType::boolean, "");
    wait(launch(std::move(call),
                [&](MPI_Request* request) { return MPI_Ibarrier(comm_, request); }));
  }

  void progress() override {
    for (auto& [sequence, flight] : in_flight_)
      poll(flight);
  }

  /// Polls `pending` until it completes or the timeout passes; the first polls spin, then
  /// the thread sleeps a little between polls (a waiting rank leaves its core to others).
  void wait(Pending pending) override {
    auto it = in_flight_.find(pending);
    if (it == in_flight_.end()) return; // completed and collected already
    Flight& flight = it->second;
    auto start = std::chrono::steady_clock::now();
    std::string line = "sinter: rank " + std::to_string(rank_) + " was stopped while waiting in " +
                       describe(flight.call) +
                       " (the job ended: another rank died or was stopped; mpirun names it)\n";
    waiting_length = 0;
    std::memcpy(waiting_line, line.data(), std::min(line.size(), sizeof waiting_line));
    waiting_length = static_cast<std::sig_atomic_t>(std::min(line.size(), sizeof waiting_line));
    for (int polls = 0; !poll(flight); ++polls) {
      auto waited = std::chrono::steady_clock::now() - flight.started;
      if (waited > timeout_) {
        double seconds = std::chrono::duration<double>(waited).count();
        char took[32];
        std::snprintf(took, sizeof took, "%.1f", seconds);
        fail("sinter: rank " + std::to_string(rank_) + " waited " + took + " s in " +
             describe(flight.call) + ": " + missing_ranks(flight.call) +
             " (SINTER_COLLECTIVE_TIMEOUT or --collective-timeout sets the limit)");
      }
      if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    waiting_length = 0;
    stats_.waited_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stats_.in_flight_seconds +=
        std::chrono::duration<double>(flight.finished - flight.started).count();
    in_flight_.erase(it);
  }

private:
  struct Call {
    const char* name;
    int64_t sequence, count;
    DType type;
    std::string detail;
  };
  struct Flight {
    Call call;
    MPI_Request request = MPI_REQUEST_NULL;
    std::chrono::steady_clock::time_point started, finished;
    bool done = false;
  };

  static int checked_count(int64_t count) {
    if (count < 0 || count > std::numeric_limits<int>::max())
      throw std::invalid_argument("sinter: a collective of " + std::to_string(count) +
                                  " elements (MPI takes up to 2^31 - 1 per call)");
    return static_cast<int>(count);
  }

  Call begin(const char* name, int64_t count, DType type, std::string detail) {
    mpi_type(type, name); // refuses what MPI cannot reduce before anything starts
    std::lock_guard lock(mutex_);
    if (job_broken)
      throw CollectiveError(std::string("sinter: ") + name +
                            " after an earlier collective failed: the job cannot go on");
    Call call{name, ++sequence_, count, type, std::move(detail)};
    board_words_[entered_word] = call.sequence;
    MPI_Win_sync(board_);
    return call;
  }

  template <class Start> Pending launch(Call call, Start start) {
    Flight flight{std::move(call)};
    flight.started = std::chrono::steady_clock::now();
    check(flight.call, start(&flight.request));
    ++stats_.count;
    stats_.bytes += flight.call.count * static_cast<int64_t>(dtype_bytes(flight.call.type));
    Pending id = flight.call.sequence;
    in_flight_.emplace(id, std::move(flight));
    return id;
  }

  /// Whether `flight` has completed (testing it once if not yet).
  bool poll(Flight& flight) {
    if (flight.done) return true;
    ++board_words_[polls_word]; // this rank is alive and waiting (read by missing_ranks)
    int done = 0;
    check(flight.call, MPI_Test(&flight.request, &done, MPI_STATUS_IGNORE));
    if (done) {
      flight.done = true;
      flight.finished = std::chrono::steady_clock::now();
    }
    return flight.done;
  }

  std::string describe(const Call& call) const {
    std::ostringstream os;
    os << call.name << " #" << call.sequence << " (step " << step_;
    if (std::strcmp(call.name, "barrier") != 0)
      os << ", " << call.count << " " << dtype_name(call.type)
         << (call.detail.empty() ? "" : " " + call.detail);
    os << ")";
    return os.str();
  }

  void check(const Call& call, int code) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    fail("sinter: rank " + std::to_string(rank_) + ": " + describe(call) +
         " failed in MPI: " + std::string(text, static_cast<std::size_t>(length)));
  }

  /// Why collective `call` has not completed, rank by rank, from the arrival board: the ranks
  /// that never entered it, those that entered it but stopped polling (stopped, or stuck in a
  /// system call), and those whose board could not be read. Each read is bounded to a few
  /// seconds: a stopped rank may not answer.
  std::string missing_ranks(const Call& call) {
    auto read_board = [&](int r) -> std::optional<std::array<int64_t, 2>> {
      std::array<int64_t, 2> words{-1, -1};
      MPI_Request request;
      if (MPI_Rget(words.data(), 2, MPI_INT64_T, r, 0, 2, MPI_INT64_T, board_, &request) !=
          MPI_SUCCESS)
        return std::nullopt;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      int done = 0;
      while (!done && std::chrono::steady_clock::now() < deadline) {
        ++board_words_[polls_word]; // still alive: another rank may be looking at this one
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!done) return std::nullopt;
      return words;
    };
    std::vector<int> missing, unknown, stopped;
    std::map<int, int64_t> arrived; // rank -> its poll count
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      auto words = read_board(r);
      if (!words)
        unknown.push_back(r);
      else if ((*words)[entered_word] < call.sequence)
        missing.push_back(r);
      else
        arrived[r] = (*words)[polls_word];
    }
    // A rank inside the collective polls it thousands of times a second while it waits.
    if (!arrived.empty()) {
      // Other ranks that timed out look at this one meanwhile: it keeps counting.
      auto look_again = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (std::chrono::steady_clock::now() < look_again) {
        ++board_words_[polls_word];
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      for (auto [r, polls] : arrived) {
        auto again = read_board(r);
        if (!again)
          unknown.push_back(r);
        else if ((*again)[polls_word] == polls)
          stopped.push_back(r);
      }
    }
    auto ranks = [](const std::vector<int>& list) {
      std::string out = list.size() > 1 ? "ranks " : "rank ";
      for (std::size_t i = 0; i < list.size(); ++i)
        out += (i ? ", " : "") + std::to_string(list[i]);
      return out;
    };
    std::string out;
    auto add = [&](const std::vector<int>& list, const std::string& what) {
      if (!list.empty()) out += (out.empty() ? "" : "; ") + ranks(list) + " " + what;
    };
    add(missing, "never arrived (stalled or died)");
    add(stopped, "arrived but stopped inside it (no poll for 1 s: stopped, or stuck in a system "
                 "call)");
    add(unknown, "did not answer");
    return out.empty() ? "every rank arrived and is still waiting in it, but it did not complete "
                         "(the transport is stuck)"
                       : out;
  }

  [[noreturn]] void fail(const std::string& message) {
    job_broken = true;
    throw CollectiveError(message);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Win board_ = MPI_WIN_NULL;
  /// This rank's words on the arrival board: collectives entered, polls while waiting.
  static constexpr int entered_word = 0, polls_word = 1;
  int64_t* board_words_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::mutex mutex_;
  std::map<Pending, Flight> in_flight_;
};

class SingleProcess final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view transport() const override { return "single"; }
  Pending start_all_reduce(const void* send, void* recv, int64_t count, DType type,
                           ReduceOp) override {
    return copy(send, recv, count, type);
  }
  Pending start_reduce_scatter(const void* send, void* recv, int64_t count, DType type,
                               ReduceOp) override {
    return copy(send, recv, count, type);
  }
  Pending start_all_gather(const void* send, void* recv, int64_t count, DType type) override {
    return copy(send, recv, count, type);
  }
  Pending start_broadcast(const void* send, void* recv, int64_t count, DType type,
                          int root) override {
    if (root != 0)
      throw std::invalid_argument("sinter: broadcast from rank " + std::to_string(root) +
                                  " in a world of 1");
    return copy(send, recv, count, type);
  }
  void wait(Pending) override {}
  void progress() override {}
  void barrier() override { ++sequence_; }

private:
  Pending copy(const void* send, void* recv, int64_t count, DType type) {
    if (send != recv) std::memmove(recv, send, static_cast<std::size_t>(count) * dtype_bytes(type));
    ++stats_.count;
    stats_.bytes += count * static_cast<int64_t>(dtype_bytes(type));
    return ++sequence_;
  }
};

} // namespace

WorldPlace world_place_from_environment() {
  WorldPlace place;
  place.size = environment_int("OMPI_COMM_WORLD_SIZE", environment_int("PMI_SIZE", 1));
  place.rank = environment_int("OMPI_COMM_WORLD_RANK",
                               environment_int("PMI_RANK", environment_int("PMIX_RANK", 0)));
  place.local_rank =
      environment_int("OMPI_COMM_WORLD_LOCAL_RANK", environment_int("MPI_LOCALRANKID", place.rank));
  if (place.size < 1 || place.rank >= place.size)
    throw std::invalid_argument("sinter: the launcher's environment says rank " +
                                std::to_string(place.rank) + " of " + std::to_string(place.size));
  return place;
}

std::chrono::duration<double> collective_timeout_from_environment() {
  const char* value = setting("SINTER_COLLECTIVE_TIMEOUT");
  if (!value || !*value) return std::chrono::seconds(300);
  char* end = nullptr;
  double seconds = std::strtod(value, &end);
  if (end == value || *end != '\0' || !(seconds > 0) || !std::isfinite(seconds))
    throw std::invalid_argument(std::string("sinter: SINTER_COLLECTIVE_TIMEOUT='") + value +
                                "' is not a number of seconds above 0 (e.g. 300 or 2.5)");
  return std::chrono::duration<double>(seconds);
}

Communicator& world() {
  static std::unique_ptr<Communicator> communicator = [] {
    WorldPlace place = world_place_from_environment();
    std::unique_ptr<Communicator> c;
    if (place.launched())
      c = std::make_unique<MpiCommunicator>(place);
    else
      c = std::make_unique<SingleProcess>();
    c->set_timeout(collective_timeout_from_environment());
    return c;
  }();
  return *communicator;
}

std::unique_ptr<Communicator> single_process_communicator() {
  return std::make_unique<SingleProcess>();
}

Communicator& lone_rank() {
  static SingleProcess alone;
  return alone;
}

void check_ranks_agree(Communicator& communicator, const std::vector<std::string>& lines,
                       const std::string& what) {
  if (communicator.size() == 1) return;
  std::string mine;
  for (const std::string& line : lines)
    mine += line + "\n";
  // Rank 0's text to every rank: its length, then its bytes.
  std::vector<int64_t> length{static_cast<int64_t>(mine.size())};
  communicator.broadcast(length.data(), 1, DType::i64, 0);
  std::string theirs(static_cast<std::size_t>(length[0]), '\0');
  if (communicator.rank() == 0) theirs = mine;
  communicator.broadcast(theirs.data(), length[0], DType::boolean, 0);
  std::string difference;
  if (mine != theirs) {
    std::istringstream a(mine), b(theirs);
    std::string here, there;
    for (;;) {
      bool more_here = static_cast<bool>(std::getline(a, here));
      bool more_there = static_cast<bool>(std::getline(b, there));
      if (!more_here && !more_there) break;
      if (more_here && more_there && here == there) continue;
      difference = "sinter: rank " + std::to_string(communicator.rank()) + " and rank 0 " +
                   "disagree on " + what + ": here '" + (more_here ? here : "(nothing)") +
                   "', on rank 0 '" + (more_there ? there : "(nothing)") + "'";
      break;
    }
  }
  // Which ranks differ, known to all.
  std::vector<int32_t> differs(static_cast<std::size_t>(communicator.size()), 0);
  differs[static_cast<std::size_t>(communicator.rank())] = difference.empty() ? 0 : 1;
  communicator.all_reduce(differs.data(), communicator.size(), DType::i32, ReduceOp::max);
  std::string ranks;
  for (int r = 0; r < communicator.size(); ++r)
    if (differs[static_cast<std::size_t>(r)])
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (ranks.empty()) return;
  if (difference.empty())
    difference = "sinter: rank" + std::string(ranks.find(',') == std::string::npos ? " " : "s ") +
                 ranks + " disagree with rank 0 on " + what + " (each says how)";
  throw std::invalid_argument(difference);
}

} // namespace sinter
