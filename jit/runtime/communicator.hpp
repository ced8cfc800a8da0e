// jit/runtime/communicator.hpp — the ranks of a job and the collectives between them (MPI)
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

/// Collectives between the ranks of a job, on host buffers, blocking the calling thread and
/// bounded by a timeout. Every rank must make the same calls in the same order with the same
/// counts and types (a difference in count or type is detected and named).
class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi" or "single" (a world of one, no library calls).
  virtual std::string_view transport() const = 0;

  /// `data` (count elements of `type`) becomes the reduction over all ranks, on every rank.
  virtual void all_reduce(void* data, int64_t count, DType type, ReduceOp op) = 0;
  /// `send` holds size() * recv_count elements; rank r receives the reduction of block r.
  virtual void reduce_scatter(const void* send, void* recv, int64_t recv_count, DType type,
                              ReduceOp op) = 0;
  /// `recv` (size() * send_count elements) gets every rank's `send`, in rank order.
  virtual void all_gather(const void* send, void* recv, int64_t send_count, DType type) = 0;
  /// `data` on every rank becomes root's.
  virtual void broadcast(void* data, int64_t count, DType type, int root) = 0;
  virtual void barrier() = 0;

  /// The training step the next collectives belong to (named by errors).
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }
  void set_timeout(std::chrono::duration<double> timeout) { timeout_ = timeout; }
  std::chrono::duration<double> timeout() const { return timeout_; }
  /// Collectives started so far (each rank counts the same).
  int64_t collectives() const { return sequence_; }

protected:
  int64_t step_ = 0;
  int64_t sequence_ = 0;
  std::chrono::duration<double> timeout_ = std::chrono::seconds(300);
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
