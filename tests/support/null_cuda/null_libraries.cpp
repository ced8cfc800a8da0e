// tests/support/null_cuda/null_libraries.cpp — the cuBLASLt and NCCL entry points sinter loads,
// checking shapes and that every operand lies in device memory, costing each call, running none
#include "null_state.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

using namespace sinter::null_gpu;

namespace {

// cuBLASLt's statuses and the attribute numbers sinter sets (cublasLt.h).
constexpr int blas_success = 0, blas_not_initialized = 1, blas_invalid_value = 7,
              blas_not_supported = 15;
constexpr int cuda_r_32f = 0, cuda_r_64f = 1, cuda_r_16f = 2, cuda_r_16bf = 14;
constexpr int compute_32f_fast_tf32 = 77, compute_32f_fast_16bf = 75, compute_32f_fast_16f = 74;

struct Handle {
  int magic = 0x4c74;
};

struct MatmulDesc {
  int compute = 0, scale = 0;
  int32_t trans_a = 0, trans_b = 0;
  uint32_t epilogue = 1; // CUBLASLT_EPILOGUE_DEFAULT
  uint64_t bias = 0;
  int32_t bias_type = -1; // CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: -1 is D's type
  uint64_t aux = 0;       // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: GELU's inputs
  int64_t aux_ld = 0;     // CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD
};

/// GELU_AUX_BIAS (written) and DGELU (read) take a matrix of GELU inputs of D's type.
bool gelu_aux_epilogue(uint32_t epilogue) { return epilogue == 164 || epilogue == 192; }

struct Layout {
  int type = 0;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};

struct Preference {
  uint64_t workspace = 0;
};

struct Algo {
  uint64_t data[8];
};
struct HeuristicResult {
  Algo algo;
  std::size_t workspace_size;
  int state;
  float waves_count;
  int reserved[4];
};

std::size_t element_bytes(int type) {
  switch (type) {
  case cuda_r_64f: return 8;
  case cuda_r_32f: return 4;
  case cuda_r_16f:
  case cuda_r_16bf: return 2;
  default: return 0;
  }
}

/// The bytes a matrix layout spans from its base pointer (column-major, ld ≥ rows).
uint64_t extent(const Layout& l) {
  uint64_t one = (l.cols == 0 ? 0 : (l.cols - 1) * static_cast<uint64_t>(l.ld) + l.rows);
  return (one + static_cast<uint64_t>(std::max(l.batch - 1, 0)) * static_cast<uint64_t>(l.stride)) *
         element_bytes(l.type);
}

int blas_fail(State& s, int status, std::string detail) {
  s.fail(status, "cuBLASLt: " + detail);
  return status;
}

/// What op(A)·op(B) = C asks for, or an error: m, n, k of the product.
int product_shape(State& s, const MatmulDesc& d, const Layout& a, const Layout& b, const Layout& c,
                  uint64_t& m, uint64_t& n, uint64_t& k) {
  m = d.trans_a ? a.cols : a.rows;
  k = d.trans_a ? a.rows : a.cols;
  uint64_t kb = d.trans_b ? b.cols : b.rows;
  n = d.trans_b ? b.rows : b.cols;
  if (kb != k || c.rows != m || c.cols != n)
    return blas_fail(s, blas_invalid_value,
                     "op(A) is " + std::to_string(m) + "x" + std::to_string(k) + ", op(B) " +
                         std::to_string(kb) + "x" + std::to_string(n) + ", C " +
                         std::to_string(c.rows) + "x" + std::to_string(c.cols) +
                         ": the shapes do not multiply");
  for (const Layout* l : {&a, &b, &c})
    if (l->ld < static_cast<int64_t>(l->rows) || element_bytes(l->type) == 0)
      return blas_fail(s, blas_invalid_value, "a layout has ld < rows or an unknown type");
  if (a.batch != b.batch || a.batch != c.batch)
    return blas_fail(s, blas_invalid_value, "A, B and C have different batch counts");
  return blas_success;
}

} // namespace

NULL_GPU_API int cublasLtCreate(void** handle) {
  if (!handle) return blas_invalid_value;
  *handle = new Handle();
  return blas_success;
}

NULL_GPU_API int cublasLtDestroy(void* handle) {
  delete static_cast<Handle*>(handle);
  return blas_success;
}

NULL_GPU_API const char* cublasLtGetStatusName(int status) {
  switch (status) {
  case blas_success: return "CUBLAS_STATUS_SUCCESS";
  case blas_not_initialized: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case blas_invalid_value: return "CUBLAS_STATUS_INVALID_VALUE";
  case blas_not_supported: return "CUBLAS_STATUS_NOT_SUPPORTED";
  default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

NULL_GPU_API int cublasLtMatmulDescCreate(void** desc, int compute, int scale) {
  auto* d = new MatmulDesc();
  d->compute = compute;
  d->scale = scale;
  *desc = d;
  return blas_success;
}

NULL_GPU_API int cublasLtMatmulDescDestroy(void* desc) {
  delete static_cast<MatmulDesc*>(desc);
  return blas_success;
}

NULL_GPU_API int cublasLtMatmulDescSetAttribute(void* desc, int attribute, const void* value,
                                                std::size_t size) {
  auto* d = static_cast<MatmulDesc*>(desc);
  if (!d || !value) return blas_invalid_value;
  auto take = [&](auto& field) {
    if (size != sizeof field) return blas_invalid_value;
    std::memcpy(&field, value, size);
    return blas_success;
  };
  switch (attribute) {
  case 3: return take(d->trans_a);
  case 4: return take(d->trans_b);
  case 7: return take(d->epilogue);
  case 8: return take(d->bias);
  case 11: return take(d->aux);
  case 12: return take(d->aux_ld);
  case 26: {
    int r = take(d->bias_type);
    if (r == blas_success && d->bias_type != -1 && element_bytes(d->bias_type) == 0)
      return blas_invalid_value;
    return r;
  }
  default: return blas_success;
  }
}

NULL_GPU_API int cublasLtMatrixLayoutCreate(void** layout, int type, uint64_t rows, uint64_t cols,
                                            int64_t ld) {
  if (!layout || element_bytes(type) == 0) return blas_invalid_value;
  *layout = new Layout{type, rows, cols, ld, 1, 0};
  return blas_success;
}

NULL_GPU_API int cublasLtMatrixLayoutDestroy(void* layout) {
  delete static_cast<Layout*>(layout);
  return blas_success;
}

NULL_GPU_API int cublasLtMatrixLayoutSetAttribute(void* layout, int attribute, const void* value,
                                                  std::size_t size) {
  auto* l = static_cast<Layout*>(layout);
  if (!l || !value) return blas_invalid_value;
  if (attribute == 5 && size == sizeof l->batch)
    std::memcpy(&l->batch, value, size);
  else if (attribute == 6 && size == sizeof l->stride)
    std::memcpy(&l->stride, value, size);
  else if (attribute == 5 || attribute == 6)
    return blas_invalid_value;
  return blas_success;
}

NULL_GPU_API int cublasLtMatmulPreferenceCreate(void** preference) {
  *preference = new Preference();
  return blas_success;
}

NULL_GPU_API int cublasLtMatmulPreferenceDestroy(void* preference) {
  delete static_cast<Preference*>(preference);
  return blas_success;
}

NULL_GPU_API int cublasLtMatmulPreferenceSetAttribute(void* preference, int attribute,
                                                      const void* value, std::size_t size) {
  auto* p = static_cast<Preference*>(preference);
  if (!p || !value) return blas_invalid_value;
  if (attribute == 1 && size == sizeof p->workspace) std::memcpy(&p->workspace, value, size);
  return blas_success;
}

NULL_GPU_API int cublasLtMatmulAlgoGetHeuristic(void* handle, void* desc, void* a, void* b, void* c,
                                                void* d, void*, int requested,
                                                HeuristicResult* results, int* found) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (!handle) return blas_fail(s, blas_not_initialized, "no handle");
  if (!desc || !a || !b || !c || !d || !results || !found || requested < 1)
    return blas_fail(s, blas_invalid_value, "a null descriptor or result");
  uint64_t m = 0, n = 0, k = 0;
  const auto& md = *static_cast<MatmulDesc*>(desc);
  if (int r = product_shape(s, md, *static_cast<Layout*>(a), *static_cast<Layout*>(b),
                            *static_cast<Layout*>(c), m, n, k))
    return r;
  // A bias gradient (BGRADA, BGRADB) of another type than D: the H200's cuBLASLt had no
  // algorithm for a bf16 GEMM's f32 bias gradient (2026-11-29: sinter's probe plan was turned
  // down there, and GPT-2's step planned its 49 bias gradients as column sums).
  bool bias_gradient = md.epilogue == 256 || md.epilogue == 512;
  int d_type = static_cast<Layout*>(d)->type;
  if (bias_gradient && md.bias_type != -1 && md.bias_type != d_type)
    return blas_fail(s, blas_not_supported,
                     "no algorithm for a bias gradient of another type than D's");
  // GELU's inputs lie as D does: cuBLASLt asks for a leading dimension of at least D's rows,
  // divisible by 8.
  if (gelu_aux_epilogue(md.epilogue) && (md.aux_ld < static_cast<int64_t>(m) || md.aux_ld % 8 != 0))
    return blas_fail(s, blas_invalid_value,
                     "EPILOGUE_AUX_LD " + std::to_string(md.aux_ld) + " for D's " +
                         std::to_string(m) + " rows (at least that, divisible by 8)");
  results[0] = HeuristicResult{};
  results[0].algo.data[0] = 0x6e756c6c; // "null"
  results[0].waves_count = 1;
  *found = 1;
  return blas_success;
}

NULL_GPU_API int cublasLtMatmul(void* handle, void* desc, const void* alpha, const void* a_ptr,
                                void* a, const void* b_ptr, void* b, const void* beta,
                                const void* c_ptr, void* c, void* d_ptr, void* d, const Algo* algo,
                                void* workspace, std::size_t workspace_bytes, void* stream) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (!handle) return blas_fail(s, blas_not_initialized, "no handle");
  if (!desc || !a || !b || !c || !d || !alpha || !beta || !algo)
    return blas_fail(s, blas_invalid_value, "a null descriptor, scale or algorithm");
  if (s.need_context()) return blas_fail(s, blas_not_initialized, "no CUDA context is current");
  const auto& md = *static_cast<MatmulDesc*>(desc);
  const auto &la = *static_cast<Layout*>(a), &lb = *static_cast<Layout*>(b),
             &lc = *static_cast<Layout*>(c);
  uint64_t m = 0, n = 0, k = 0;
  if (int r = product_shape(s, md, la, lb, lc, m, n, k)) return r;
  Work w{Work::gemm};
  auto operand = [&](const void* pointer, uint64_t bytes, const char* which) {
    auto address = reinterpret_cast<uint64_t>(pointer);
    if (s.device_range_ok(address, bytes)) {
      w.ranges.emplace_back(address, bytes);
      return blas_success;
    }
    return blas_fail(s, blas_invalid_value,
                     std::string(which) + " (" + std::to_string(bytes) +
                         " bytes) is not inside one device allocation");
  };
  if (int r = operand(a_ptr, extent(la), "A")) return r;
  if (int r = operand(b_ptr, extent(lb), "B")) return r;
  if (int r = operand(c_ptr, extent(lc), "C")) return r;
  if (int r = operand(d_ptr, extent(*static_cast<Layout*>(d)), "D")) return r;
  bool has_bias = md.epilogue == 4 || md.epilogue == 6 || md.epilogue == 36 || md.epilogue == 164 ||
                  md.epilogue == 256;
  if (has_bias) {
    uint64_t bias_rows = md.epilogue == 256 ? (md.trans_a ? la.cols : la.rows) : m;
    int bias_type = md.bias_type == -1 ? lc.type : md.bias_type;
    if (int r = operand(reinterpret_cast<const void*>(md.bias),
                        bias_rows * element_bytes(bias_type), "the bias"))
      return r;
  }
  if (gelu_aux_epilogue(md.epilogue)) {
    if (md.aux_ld < static_cast<int64_t>(m))
      return blas_fail(s, blas_invalid_value, "EPILOGUE_AUX_LD is under D's rows");
    uint64_t aux_bytes = static_cast<uint64_t>(md.aux_ld) * (n - 1) * element_bytes(lc.type) +
                         m * element_bytes(lc.type);
    if (int r = operand(reinterpret_cast<const void*>(md.aux), aux_bytes * std::max(la.batch, 1),
                        "GELU's inputs (EPILOGUE_AUX_POINTER)"))
      return r;
  }
  if (workspace_bytes && operand(workspace, workspace_bytes, "the workspace"))
    return blas_invalid_value;
  bool tensor_cores = md.compute == compute_32f_fast_tf32 || md.compute == compute_32f_fast_16bf ||
                      md.compute == compute_32f_fast_16f || element_bytes(la.type) == 2;
  double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
                 std::max(la.batch, 1);
  w.seconds =
      std::max(s.spec.launch_seconds, flops / (tensor_cores ? s.spec.flops : s.spec.fp32_flops));
  s.enqueue(s.stream(stream), std::move(w));
  return blas_success;
}

// ---- NCCL ----------------------------------------------------------------------------------

namespace {

constexpr int nccl_success = 0, nccl_invalid_argument = 4;

struct UniqueId {
  char internal[128];
};

struct Communicator {
  int ranks = 1, rank = 0;
};

std::size_t nccl_bytes(int type) {
  switch (type) {
  case 0:
  case 1: return 1; // int8, uint8
  case 2:
  case 3:
  case 7: return 4; // int32, uint32, float32
  case 4:
  case 5:
  case 8: return 8; // int64, uint64, float64
  case 6:
  case 9: return 2; // float16, bfloat16
  default: return 0;
  }
}

int collective(const void* send, void* receive, uint64_t send_bytes, uint64_t receive_bytes,
               void* comm, void* stream, const char* call) {
  State& s = State::get();
  std::lock_guard lock(s.mutex);
  if (!comm) return s.fail(nccl_invalid_argument, std::string(call) + " without a communicator");
  auto from = reinterpret_cast<uint64_t>(send), to = reinterpret_cast<uint64_t>(receive);
  if (!s.device_range_ok(from, send_bytes) || !s.device_range_ok(to, receive_bytes)) {
    s.fail(nccl_invalid_argument,
           std::string(call) + ": a buffer is not inside one device allocation");
    return nccl_invalid_argument;
  }
  const auto& c = *static_cast<Communicator*>(comm);
  Work w{Work::collective};
  w.bytes = std::max(send_bytes, receive_bytes);
  // A ring moves 2(n-1)/n of the buffer over each link; one rank moves nothing.
  double factor = c.ranks > 1 ? 2.0 * (c.ranks - 1) / c.ranks : 0.0;
  w.seconds = std::max(s.spec.launch_seconds,
                       factor * static_cast<double>(w.bytes) / s.spec.link_bandwidth);
  w.ranges = {{from, send_bytes}, {to, receive_bytes}};
  s.enqueue(s.stream(stream), std::move(w));
  return nccl_success;
}

} // namespace

NULL_GPU_API int ncclGetVersion(int* version) {
  *version = 22800;
  return nccl_success;
}

NULL_GPU_API int ncclGetUniqueId(UniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, "null-nccl", 9);
  return nccl_success;
}

NULL_GPU_API int ncclCommInitRank(void** comm, int ranks, UniqueId, int rank) {
  if (!comm || ranks < 1 || rank < 0 || rank >= ranks) return nccl_invalid_argument;
  *comm = new Communicator{ranks, rank};
  return nccl_success;
}

NULL_GPU_API int ncclCommDestroy(void* comm) {
  delete static_cast<Communicator*>(comm);
  return nccl_success;
}

NULL_GPU_API int ncclCommAbort(void* comm) { return ncclCommDestroy(comm); }

NULL_GPU_API const char* ncclGetErrorString(int status) {
  return status == nccl_success ? "no error" : "invalid argument (null NCCL: see the call)";
}

NULL_GPU_API int ncclAllReduce(const void* send, void* receive, std::size_t count, int type, int,
                               void* comm, void* stream) {
  uint64_t bytes = count * nccl_bytes(type);
  return collective(send, receive, bytes, bytes, comm, stream, "ncclAllReduce");
}

NULL_GPU_API int ncclReduceScatter(const void* send, void* receive, std::size_t count, int type,
                                   int, void* comm, void* stream) {
  int ranks = comm ? static_cast<Communicator*>(comm)->ranks : 1;
  uint64_t bytes = count * nccl_bytes(type);
  return collective(send, receive, bytes * static_cast<uint64_t>(ranks), bytes, comm, stream,
                    "ncclReduceScatter");
}

NULL_GPU_API int ncclAllGather(const void* send, void* receive, std::size_t count, int type,
                               void* comm, void* stream) {
  int ranks = comm ? static_cast<Communicator*>(comm)->ranks : 1;
  uint64_t bytes = count * nccl_bytes(type);
  return collective(send, receive, bytes, bytes * static_cast<uint64_t>(ranks), comm, stream,
                    "ncclAllGather");
}

NULL_GPU_API int ncclBroadcast(const void* send, void* receive, std::size_t count, int type, int,
                               void* comm, void* stream) {
  uint64_t bytes = count * nccl_bytes(type);
  return collective(send, receive, bytes, bytes, comm, stream, "ncclBroadcast");
}
