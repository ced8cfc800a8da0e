// kernels/cuda/nccl_bridge.hpp — NCCL through dlopen: a communicator between the GPU ranks of a job
// (its unique id broadcast over the host's communicator) and collectives on a CUDA stream
#pragma once
#include "jit/backend/cuda/cuda_driver.hpp"
#include "jit/ir/dtype.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace sinter {
class Communicator;
}

namespace sinter::kernels {

/// libnccl.so.2, loaded on first use from SINTER_LIBNCCL, the loader's path, or the CUDA
/// toolkit's lib folders. sinter builds and runs without it: a job that needs it says why not.
class Nccl {
public:
  struct Api;
  /// The library, or null (unavailable_reason() says why).
  static Nccl* get();
  static const std::string& unavailable_reason();
  /// NCCL's version code (major * 10000 + minor * 100 + patch for 2.9 and later).
  int version() const;
  /// A fresh unique id's first bytes are not all zero (checks the library works on the host).
  bool unique_id_works() const;
  const Api& api() const { return *api_; }

  /// Made once, by get(), from the entry points it found.
  explicit Nccl(std::unique_ptr<Api> api);
  ~Nccl();

private:
  std::unique_ptr<Api> api_;
};

/// The GPU ranks of `ranks`' job on the current CUDA context: rank 0 makes NCCL's unique id
/// and broadcasts it over `ranks` (MPI), then every rank joins. A world of one needs no MPI.
/// Collectives are enqueued on a stream (and so captured into a CUDA graph with the rest of
/// the step); they take device pointers and sum.
class NcclCommunicator {
public:
  explicit NcclCommunicator(Communicator& ranks);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int size() const { return size_; }
  void all_reduce(cuda::DevicePtr send, cuda::DevicePtr recv, int64_t count, DType type,
                  cuda::StreamHandle stream);
  void reduce_scatter(cuda::DevicePtr send, cuda::DevicePtr recv, int64_t recv_count, DType type,
                      cuda::StreamHandle stream);
  void all_gather(cuda::DevicePtr send, cuda::DevicePtr recv, int64_t send_count, DType type,
                  cuda::StreamHandle stream);
  void broadcast(cuda::DevicePtr send, cuda::DevicePtr recv, int64_t count, DType type, int root,
                 cuda::StreamHandle stream);

private:
  void check(int result, const char* call) const;
  Nccl& nccl_;
  void* comm_ = nullptr;
  int size_ = 1;
};

} // namespace sinter::kernels
