// kernels/cuda/nccl_bridge.cpp — libnccl.so.2 by dlopen, its communicator and collectives
#include "kernels/cuda/nccl_bridge.hpp"
#include "jit/settings.hpp"

#include "jit/dist/communicator.hpp"

#include "kernels/dynamic_library.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <vector>

namespace sinter::kernels {
namespace {

// nccl.h values, declared here so sinter builds without the NCCL headers.
using Result = int;
constexpr int unique_id_bytes = 128;
struct UniqueId {
  char internal[unique_id_bytes];
};
constexpr int nccl_sum = 0;

int nccl_type(DType type) {
  switch (type) {
  case DType::boolean: return 1; // ncclUint8
  case DType::i32: return 2;
  case DType::i64: return 4;
  case DType::f16: return 6;
  case DType::f32: return 7;
  case DType::f64: return 8;
  case DType::bf16: return 9;
  }
  return 7;
}

struct Loaded {
  Nccl* library = nullptr;
  std::string reason;
};

} // namespace

struct Nccl::Api {
  Result (*get_version)(int*) = nullptr;
  Result (*get_unique_id)(UniqueId*) = nullptr;
  Result (*comm_init_rank)(void**, int, UniqueId, int) = nullptr;
  Result (*comm_destroy)(void*) = nullptr;
  Result (*comm_abort)(void*) = nullptr;
  const char* (*error_string)(Result) = nullptr;
  Result (*all_reduce)(const void*, void*, std::size_t, int, int, void*,
                       cuda::StreamHandle) = nullptr;
  Result (*reduce_scatter)(const void*, void*, std::size_t, int, int, void*,
                           cuda::StreamHandle) = nullptr;
  Result (*all_gather)(const void*, void*, std::size_t, int, void*, cuda::StreamHandle) = nullptr;
  Result (*broadcast)(const void*, void*, std::size_t, int, int, void*,
                      cuda::StreamHandle) = nullptr;
};

namespace {

Loaded& loaded() {
  static Loaded state = [] {
    Loaded out;
    std::vector<std::string> names;
    if (const char* chosen = setting("SINTER_LIBNCCL"); chosen && *chosen) names.push_back(chosen);
    for (const char* name :
         {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2"})
      names.push_back(name);
    void* lib = cuda::open_cuda_library(names);
    if (!lib) {
      out.reason = "cannot load libnccl.so.2: install NCCL (Debian: libnccl2 from NVIDIA's "
                   "repository; or the nvidia-nccl wheel PyTorch brings) and set SINTER_LIBNCCL "
                   "to its path";
      return out;
    }
    auto api = std::make_unique<Nccl::Api>();
    EntryPoints entry(lib);
    auto need = [&](auto& slot, const char* name) { entry.need(slot, name); };
    need(api->get_version, "ncclGetVersion");
    need(api->get_unique_id, "ncclGetUniqueId");
    need(api->comm_init_rank, "ncclCommInitRank");
    need(api->comm_destroy, "ncclCommDestroy");
    need(api->comm_abort, "ncclCommAbort");
    need(api->error_string, "ncclGetErrorString");
    need(api->all_reduce, "ncclAllReduce");
    need(api->reduce_scatter, "ncclReduceScatter");
    need(api->all_gather, "ncclAllGather");
    need(api->broadcast, "ncclBroadcast");
    if (const std::string& missing = entry.missing(); !missing.empty()) {
      out.reason = "libnccl.so.2 is missing " + missing + "; install NCCL 2.12 or newer";
      return out;
    }
    out.library = new Nccl(std::move(api)); // lives for the process, like the driver
    return out;
  }();
  return state;
}

} // namespace

Nccl::Nccl(std::unique_ptr<Api> api) : api_(std::move(api)) {}
Nccl::~Nccl() = default;

Nccl* Nccl::get() { return loaded().library; }
const std::string& Nccl::unavailable_reason() { return loaded().reason; }

int Nccl::version() const {
  int v = 0;
  api_->get_version(&v);
  return v;
}

bool Nccl::unique_id_works() const {
  UniqueId id{};
  if (api_->get_unique_id(&id) != 0) return false;
  return std::any_of(std::begin(id.internal), std::end(id.internal), [](char c) { return c; });
}

NcclCommunicator::NcclCommunicator(Communicator& ranks)
    : nccl_([]() -> Nccl& {
        Nccl* lib = Nccl::get();
        if (!lib)
          throw std::runtime_error("sinter: collectives between GPU ranks need NCCL: " +
                                   Nccl::unavailable_reason());
        return *lib;
      }()),
      size_(ranks.size()) {
  UniqueId id{};
  if (ranks.rank() == 0) check(nccl_.api().get_unique_id(&id), "ncclGetUniqueId");
  if (ranks.size() > 1) ranks.broadcast(id.internal, unique_id_bytes, DType::boolean, 0);
  check(nccl_.api().comm_init_rank(&comm_, ranks.size(), id, ranks.rank()), "ncclCommInitRank");
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) nccl_.api().comm_destroy(comm_);
}

void NcclCommunicator::check(int result, const char* call) const {
  if (result == 0) return;
  throw std::runtime_error(std::string("sinter: NCCL ") + call +
                           " failed: " + nccl_.api().error_string(result));
}

void NcclCommunicator::all_reduce(cuda::DevicePtr send, cuda::DevicePtr recv, int64_t count,
                                  DType type, cuda::StreamHandle stream) {
  check(nccl_.api().all_reduce(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv),
                               static_cast<std::size_t>(count), nccl_type(type), nccl_sum, comm_,
                               stream),
        "ncclAllReduce");
}

void NcclCommunicator::reduce_scatter(cuda::DevicePtr send, cuda::DevicePtr recv,
                                      int64_t recv_count, DType type, cuda::StreamHandle stream) {
  check(nccl_.api().reduce_scatter(
            reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv),
            static_cast<std::size_t>(recv_count), nccl_type(type), nccl_sum, comm_, stream),
        "ncclReduceScatter");
}

void NcclCommunicator::all_gather(cuda::DevicePtr send, cuda::DevicePtr recv, int64_t send_count,
                                  DType type, cuda::StreamHandle stream) {
  check(nccl_.api().all_gather(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv),
                               static_cast<std::size_t>(send_count), nccl_type(type), comm_,
                               stream),
        "ncclAllGather");
}

void NcclCommunicator::broadcast(cuda::DevicePtr send, cuda::DevicePtr recv, int64_t count,
                                 DType type, int root, cuda::StreamHandle stream) {
  check(nccl_.api().broadcast(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv),
                              static_cast<std::size_t>(count), nccl_type(type), root, comm_,
                              stream),
        "ncclBroadcast");
}

} // namespace sinter::kernels
