// jit/dist/communicator.hpp — the ranks of a job and the collectives between them (MPI)
#pragma once
#include "jit/ir/dtype.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace sinter {

/// This process's place in its job, read from the launcher's environment: OpenMPI's `mpirun`
/// (OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK), MPICH's and Slurm's PMI (PMI_SIZE / PMI_RANK),
/// or PMIx (PMIX_RANK with OMPI_COMM_WORLD_SIZE). A process started on its own is rank 0 of 1.
struct WorldPlace {
  int rank = 0;
  int size = 1;
  int local_rank = 0; ///< among the ranks on this host (picks the GPU)
  bool launched() const { return size > 1; }
};
WorldPlace world_place_from_environment();

enum class ReduceOp { sum, max };

/// A collective that did not finish: a rank stalled or died, or the ranks disagree. what()
/// names the collective, its sequence number, the step, how long this rank waited and, where it
/// can tell, the ranks that never arrived. The job cannot go on; the process ends the job
/// (MPI_Abort) instead of finalising when it exits.
class CollectiveError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// How long a collective may wait for the other ranks: SINTER_COLLECTIVE_TIMEOUT (seconds,
/// decimals allowed) or 300 s. A malformed value throws std::invalid_argument naming it.
std::chrono::duration<double> collective_timeout_from_environment();

/// What a process's collectives have cost so far (docs/distributed.md, "Overlap"): a
/// collective is in flight from its start until a poll finds it complete; the caller waits
/// only in wait(). in_flight - waited is the time hidden under other work.
struct CollectiveStats {
  int64_t count = 0;
  int64_t bytes = 0;
  double in_flight_seconds = 0;
  double waited_seconds = 0;
  double hidden_fraction() const {
    return in_flight_seconds > 0 ? 1.0 - waited_seconds / in_flight_seconds : 0.0;
  }
};

/// Collectives between the ranks of a job, on host buffers, bounded by a timeout. Every rank
/// must make the same calls in the same order with the same counts and types (a difference in
/// count or type is detected and named). The blocking calls are start + wait; a compiled step
/// starts its gradient reductions as soon as their buckets are written and waits for each
/// only where its result is read, polling with progress() between kernels.
class Communicator {
public:
  /// A started collective (0: none).
  using Pending = int64_t;

  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi" or "single" (a world of one, no library calls).
  virtual std::string_view transport() const = 0;

  /// `recv` becomes the reduction of every rank's `send` (count elements of `type`; send ==
  /// recv reduces in place). Neither buffer may be touched until wait().
  virtual Pending start_all_reduce(const void* send, void* recv, int64_t count, DType type,
                                   ReduceOp op) = 0;
  /// `send` holds size() * recv_count elements; rank r receives the reduction of block r.
  virtual Pending start_reduce_scatter(const void* send, void* recv, int64_t recv_count, DType type,
                                       ReduceOp op) = 0;
  /// `recv` (size() * send_count elements) gets every rank's `send`, in rank order.
  virtual Pending start_all_gather(const void* send, void* recv, int64_t send_count,
                                   DType type) = 0;
  /// `recv` on every rank becomes root's `send` (send == recv: in place).
  virtual Pending start_broadcast(const void* send, void* recv, int64_t count, DType type,
                                  int root) = 0;
  /// Blocks until `pending` completes; throws CollectiveError after the timeout, naming the
  /// collective, its step and the ranks that never arrived.
  virtual void wait(Pending pending) = 0;
  /// Advances every started collective without blocking.
  virtual void progress() = 0;
  virtual void barrier() = 0;

  void all_reduce(void* data, int64_t count, DType type, ReduceOp op) {
    wait(start_all_reduce(data, data, count, type, op));
  }
  void reduce_scatter(const void* send, void* recv, int64_t recv_count, DType type, ReduceOp op) {
    wait(start_reduce_scatter(send, recv, recv_count, type, op));
  }
  void all_gather(const void* send, void* recv, int64_t send_count, DType type) {
    wait(start_all_gather(send, recv, send_count, type));
  }
  void broadcast(void* data, int64_t count, DType type, int root) {
    wait(start_broadcast(data, data, count, type, root));
  }

  /// The training step the next collectives belong to (named by errors).
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }
  void set_timeout(std::chrono::duration<double> timeout) { timeout_ = timeout; }
  std::chrono::duration<double> timeout() const { return timeout_; }
  /// Collectives started so far (each rank counts the same).
  int64_t collectives() const { return sequence_; }
  const CollectiveStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

protected:
  int64_t step_ = 0;
  int64_t sequence_ = 0;
  std::chrono::duration<double> timeout_ = std::chrono::seconds(300);
  CollectiveStats stats_;
};

/// The communicator of this process's job: MPI when launched with several ranks (MPI is
/// initialised on the first call and finalised at exit, or the job aborted after a
/// CollectiveError), else a world of one whose collectives copy or do nothing. The timeout
/// starts as collective_timeout_from_environment().
Communicator& world();

/// Checks that every rank describes the same thing: `lines` (one fact per line, e.g.
/// "parameter w f32[4,2]") against rank 0's. Every rank takes part; when any differs, every
/// rank throws std::invalid_argument: a differing rank names its first differing line and rank
/// 0's (`what` says what is compared), the others say which ranks differ.
void check_ranks_agree(Communicator& communicator, const std::vector<std::string>& lines,
                       const std::string& what);

/// A world of one, whatever the environment says (tests, tools).
std::unique_ptr<Communicator> single_process_communicator();
/// One shared world of one: what a step that trains on its own inside a job uses
/// (StepOptions::data_parallel = false).
Communicator& lone_rank();

} // namespace sinter
