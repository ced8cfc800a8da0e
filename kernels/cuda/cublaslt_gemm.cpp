// kernels/cuda/cublaslt_gemm.cpp — cuBLASLt descriptors, heuristics per shape, row-major via swap
#include "kernels/cuda/cublaslt_gemm.hpp"
#include "jit/settings.hpp"

#include "kernels/dynamic_library.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace sinter::kernels {
namespace {

// cublasLt.h / library_types.h / cublas_api.h values, declared here so sinter builds without
// the CUDA headers.
using Status = int;
constexpr int cuda_r_32f = 0, cuda_r_64f = 1, cuda_r_16f = 2, cuda_r_16bf = 14;
constexpr int compute_32f = 68, compute_32f_fast_tf32 = 77, compute_64f = 70;
constexpr int op_n = 0, op_t = 1;
constexpr int desc_transa = 3, desc_transb = 4, desc_epilogue = 7, desc_bias_pointer = 8,
              desc_aux_pointer = 11, desc_aux_ld = 12, desc_bias_data_type = 26;
constexpr uint32_t epilogue_bias = 4, epilogue_relu_bias = 6, epilogue_gelu_bias = 36,
                   epilogue_gelu_aux_bias = 164, epilogue_dgelu = 192,
                   epilogue_bias_gradient_a = 256;
constexpr int layout_batch_count = 5, layout_strided_batch_offset = 6;
constexpr int pref_max_workspace_bytes = 1;

struct Algo {
  uint64_t data[8];
};
struct HeuristicResult {
  Algo algo;
  std::size_t workspace_size;
  Status state;
  float waves_count;
  int reserved[4];
};

} // namespace

struct CublasLt::Api {
  Status (*create)(void**) = nullptr;
  Status (*destroy)(void*) = nullptr;
  const char* (*status_name)(Status) = nullptr;
  Status (*desc_create)(void**, int, int) = nullptr;
  Status (*desc_destroy)(void*) = nullptr;
  Status (*desc_set)(void*, int, const void*, std::size_t) = nullptr;
  Status (*layout_create)(void**, int, uint64_t, uint64_t, int64_t) = nullptr;
  Status (*layout_destroy)(void*) = nullptr;
  Status (*layout_set)(void*, int, const void*, std::size_t) = nullptr;
  Status (*pref_create)(void**) = nullptr;
  Status (*pref_destroy)(void*) = nullptr;
  Status (*pref_set)(void*, int, const void*, std::size_t) = nullptr;
  Status (*heuristic)(void*, void*, void*, void*, void*, void*, void*, int, HeuristicResult*,
                      int*) = nullptr;
  Status (*matmul)(void*, void*, const void*, const void*, void*, const void*, void*, const void*,
                   const void*, void*, void*, void*, const Algo*, void*, std::size_t,
                   cuda::StreamHandle) = nullptr;

  void check(Status s, const char* call) const {
    if (s == 0) return;
    throw std::runtime_error(std::string("sinter: cuBLASLt ") + call +
                             " failed: " + (status_name ? status_name(s) : std::to_string(s)));
  }
};

/// One shape's descriptors and the algorithm the heuristic picked.
struct CublasLt::Plan {
  const Api* api = nullptr;
  void* desc = nullptr;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  Algo algo{};
  bool f64 = false;
  ~Plan() {
    if (!api) return;
    for (void* layout : {a, b, c})
      if (layout) api->layout_destroy(layout);
    if (desc) api->desc_destroy(desc);
  }
};

namespace {

struct Loaded {
  CublasLt* library = nullptr;
  std::string reason;
  operator std::pair<CublasLt*, std::string>() const { return {library, reason}; }
};

} // namespace

Fp32Math fp32_math_from_environment() {
  const char* v = setting("SINTER_TF32");
  if (!v || !*v || std::string_view(v) == "0") return Fp32Math::exact;
  if (std::string_view(v) == "1") return Fp32Math::tf32;
  throw std::invalid_argument(std::string("sinter: SINTER_TF32='") + v + "' — use 0 or 1");
}

CublasLt* CublasLt::get() { return loaded().first; }

std::pair<CublasLt*, std::string>& CublasLt::loaded() {
  static std::pair<CublasLt*, std::string> state = [] {
    Loaded out;
    void* lib =
        cuda::open_cuda_library({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"});
    if (!lib) {
      out.reason = "cannot load libcublasLt.so (.13 or .12): install the CUDA libraries "
                   "(cuBLAS) or add their folder to LD_LIBRARY_PATH";
      return out;
    }
    auto api = std::make_unique<Api>();
    EntryPoints entry(lib);
    auto need = [&](auto& slot, const char* name) { entry.need(slot, name); };
    need(api->create, "cublasLtCreate");
    need(api->destroy, "cublasLtDestroy");
    need(api->status_name, "cublasLtGetStatusName");
    need(api->desc_create, "cublasLtMatmulDescCreate");
    need(api->desc_destroy, "cublasLtMatmulDescDestroy");
    need(api->desc_set, "cublasLtMatmulDescSetAttribute");
    need(api->layout_create, "cublasLtMatrixLayoutCreate");
    need(api->layout_destroy, "cublasLtMatrixLayoutDestroy");
    need(api->layout_set, "cublasLtMatrixLayoutSetAttribute");
    need(api->pref_create, "cublasLtMatmulPreferenceCreate");
    need(api->pref_destroy, "cublasLtMatmulPreferenceDestroy");
    need(api->pref_set, "cublasLtMatmulPreferenceSetAttribute");
    need(api->heuristic, "cublasLtMatmulAlgoGetHeuristic");
    need(api->matmul, "cublasLtMatmul");
    if (const std::string& missing = entry.missing(); !missing.empty()) {
      out.reason = "libcublasLt is missing " + missing + "; install cuBLAS 12 or newer";
      return out;
    }
    auto* library = new CublasLt(); // lives for the process, like the driver
    library->api_ = std::move(api);
    if (Status s = library->api_->create(&library->handle_); s != 0) {
      out.reason = "cublasLtCreate failed with status " + std::to_string(s);
      delete library;
      return out;
    }
    out.library = library;
    return out;
  }();
  return state;
}

const std::string& CublasLt::unavailable_reason() { return loaded().second; }

CublasLt::~CublasLt() {
  plans_.clear();
  if (handle_) api_->destroy(handle_);
}

const CublasLt::Plan& CublasLt::plan(const GpuGemmShape& g) {
  std::lock_guard lock(mutex_);
  auto& slot = plans_[g.key()];
  if (slot) return *slot;
  int data = 0, compute = compute_32f, scale = cuda_r_32f;
  switch (g.dtype) {
  case DType::f32:
    data = cuda_r_32f;
    compute = g.fp32 == Fp32Math::tf32 ? compute_32f_fast_tf32 : compute_32f;
    break;
  case DType::bf16: data = cuda_r_16bf; break;
  case DType::f16: data = cuda_r_16f; break;
  case DType::f64:
    data = scale = cuda_r_64f;
    compute = compute_64f;
    break;
  default:
    plans_.erase(g.key());
    throw std::invalid_argument("sinter: matmul of " + std::string(dtype_name(g.dtype)) +
                                " is not supported on CUDA; cast to f32, bf16 or f16 first");
  }
  auto plan = std::make_unique<Plan>();
  plan->api = api_.get();
  plan->f64 = g.dtype == DType::f64;
  const Api& api = *api_;
  const GemmShape& s = g.shape;
  // cuBLASLt is column-major. Row-major C[m,n] = A·B is column-major Cᵀ[n,m] = Bᵀ·Aᵀ, and a
  // row-major matrix read column-major is its transpose: so B goes first and nothing moves.
  api.check(api.desc_create(&plan->desc, compute, scale), "cublasLtMatmulDescCreate");
  int trans_first = s.trans_b ? op_t : op_n, trans_second = s.trans_a ? op_t : op_n;
  api.check(api.desc_set(plan->desc, desc_transa, &trans_first, sizeof trans_first), "TRANSA");
  api.check(api.desc_set(plan->desc, desc_transb, &trans_second, sizeof trans_second), "TRANSB");
  if (g.epilogue != GemmEpilogueOp::none) {
    // Column-major D is n × m, so the row-major bias over columns is cuBLASLt's per-row bias;
    // and our B goes first (cuBLASLt's A): BGRADA sums it over k, giving [n].
    uint32_t epilogue = epilogue_bias;
    switch (g.epilogue) {
    case GemmEpilogueOp::relu_bias: epilogue = epilogue_relu_bias; break;
    case GemmEpilogueOp::gelu_bias: epilogue = epilogue_gelu_bias; break;
    case GemmEpilogueOp::gelu_aux_bias: epilogue = epilogue_gelu_aux_bias; break;
    case GemmEpilogueOp::bias_gradient: epilogue = epilogue_bias_gradient_a; break;
    case GemmEpilogueOp::gelu_gradient: epilogue = epilogue_dgelu; break;
    default: break;
    }
    api.check(api.desc_set(plan->desc, desc_epilogue, &epilogue, sizeof epilogue), "EPILOGUE");
    if (g.epilogue != GemmEpilogueOp::gelu_gradient) {
      const void* bias = reinterpret_cast<const void*>(static_cast<uintptr_t>(g.bias));
      api.check(api.desc_set(plan->desc, desc_bias_pointer, &bias, sizeof bias), "BIAS_POINTER");
    }
    if (g.epilogue == GemmEpilogueOp::gelu_aux_bias ||
        g.epilogue == GemmEpilogueOp::gelu_gradient) {
      // GELU's inputs lie as D does: column-major n × m, leading dimension n.
      const void* aux = reinterpret_cast<const void*>(static_cast<uintptr_t>(g.aux));
      int64_t aux_ld = s.n;
      api.check(api.desc_set(plan->desc, desc_aux_pointer, &aux, sizeof aux),
                "EPILOGUE_AUX_POINTER");
      api.check(api.desc_set(plan->desc, desc_aux_ld, &aux_ld, sizeof aux_ld), "EPILOGUE_AUX_LD");
    }
    if (g.bias_dtype && *g.bias_dtype != g.dtype) {
      int32_t bias_type = *g.bias_dtype == DType::f32    ? cuda_r_32f
                          : *g.bias_dtype == DType::bf16 ? cuda_r_16bf
                          : *g.bias_dtype == DType::f16  ? cuda_r_16f
                                                         : cuda_r_64f;
      api.check(api.desc_set(plan->desc, desc_bias_data_type, &bias_type, sizeof bias_type),
                "BIAS_DATA_TYPE");
    }
  }
  auto layout = [&](void** out, int64_t rows, int64_t cols) {
    api.check(api.layout_create(out, data, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols),
                                rows),
              "cublasLtMatrixLayoutCreate");
    if (g.batch > 1) {
      int32_t count = static_cast<int32_t>(g.batch);
      int64_t stride = rows * cols;
      api.check(api.layout_set(*out, layout_batch_count, &count, sizeof count), "BATCH_COUNT");
      api.check(api.layout_set(*out, layout_strided_batch_offset, &stride, sizeof stride),
                "STRIDED_BATCH_OFFSET");
    }
  };
  // Stored B is [k,n] (or [n,k] when transposed); column-major that is n×k (or k×n).
  layout(&plan->a, s.trans_b ? s.k : s.n, s.trans_b ? s.n : s.k);
  layout(&plan->b, s.trans_a ? s.m : s.k, s.trans_a ? s.k : s.m);
  layout(&plan->c, s.n, s.m);
  void* preference = nullptr;
  api.check(api.pref_create(&preference), "cublasLtMatmulPreferenceCreate");
  uint64_t workspace = workspace_bytes;
  api.pref_set(preference, pref_max_workspace_bytes, &workspace, sizeof workspace);
  HeuristicResult result{};
  int found = 0;
  Status status = api.heuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c, preference,
                                1, &result, &found);
  api.pref_destroy(preference);
  api.check(status, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0)
    throw std::runtime_error("sinter: cuBLASLt has no algorithm for a " +
                             std::string(dtype_name(g.dtype)) + " GEMM m=" + std::to_string(s.m) +
                             " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k));
  plan->algo = result.algo;
  slot = std::move(plan);
  return *slot;
}

void CublasLt::matmul(const GpuGemmShape& gemm, cuda::DevicePtr a, cuda::DevicePtr b,
                      cuda::DevicePtr c, cuda::DevicePtr workspace, cuda::StreamHandle stream) {
  const Plan& p = plan(gemm);
  double one64 = 1.0, zero64 = 0.0;
  float one32 = 1.0f, zero32 = 0.0f;
  const void* alpha = p.f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = p.f64 ? static_cast<const void*>(&zero64) : &zero32;
  auto ptr = [](cuda::DevicePtr d) { return reinterpret_cast<void*>(static_cast<uintptr_t>(d)); };
  api_->check(api_->matmul(handle_, p.desc, alpha, ptr(b), p.a, ptr(a), p.b, beta, ptr(c), p.c,
                           ptr(c), p.c, &p.algo, ptr(workspace), workspace_bytes, stream),
              "cublasLtMatmul");
}

} // namespace sinter::kernels
