// kernels/cuda/cudnn_attention.hpp — attention forward and backward through cuDNN's fused SDPA
// (cuDNN 9's graph API), loaded with dlopen
#pragma once
#include "jit/backend/cuda/cuda_driver.hpp"
#include "jit/ir/dtype.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

namespace sinter::kernels {

/// One attention shape as cuDNN sees it: q [b, h, tq, d], k [b, h, tk, d], v [b, h, tk, dv],
/// o [b, h, tq, dv] and the gradients, row-major, each contiguous unless given strides; the row
/// log-sum-exp [b, h, tq] in f32 (the natural log of the scaled, masked scores' exponential
/// sums, as sinter's own kernels save it).
struct CudnnAttentionShape {
  /// Element strides of b, h and t (d's is 1) in the buffer an operand is read from or a result
  /// written to; all 0: packed. Views of a wider buffer (the heads of a packed qkv, a
  /// token-major o, the parts of a packed gradient) have larger ones.
  using Strides = std::array<int64_t, 3>;
  DType dtype = DType::bf16; ///< bf16 or f16
  int64_t b = 1, h = 1, tq = 0, tk = 0, d = 0, dv = 0;
  float scale = 1.0f;
  bool causal = false;   ///< query i attends to keys j <= i (the top-left diagonal)
  bool backward = false; ///< the gradient graph (dq, dk, dv) instead of the forward
  bool saves_lse = true; ///< forward: also write the log-sum-exp (training)
  Strides q_strides{}, k_strides{}, v_strides{}, do_strides{}; ///< do: the backward's dO
  Strides o_strides{}; ///< the forward's result, the backward's operand o
  Strides dq_strides{}, dk_strides{}, dv_strides{};
  std::array<Strides, 8> all_strides() const {
    return {q_strides, k_strides,  v_strides,  do_strides,
            o_strides, dq_strides, dk_strides, dv_strides};
  }
  bool strided() const {
    for (const Strides& given : all_strides())
      if (given != Strides{}) return true;
    return false;
  }
  auto key() const {
    return std::make_tuple(static_cast<int>(dtype), b, h, tq, tk, d, dv, scale, causal, backward,
                           saves_lse, all_strides());
  }
  /// "b×h×tq×tk×d bf16 causal", for log lines.
  std::string describe() const;
};

/// The device buffers of one call: the forward reads q, k, v and writes o (and lse); the
/// backward reads q, k, v, o, lse, d_o and writes dq, dk, dv.
struct CudnnAttentionBuffers {
  cuda::DevicePtr q = 0, k = 0, v = 0, o = 0, lse = 0, d_o = 0, dq = 0, dk = 0, dv = 0;
  cuda::DevicePtr workspace = 0; ///< CudnnAttention::workspace_bytes(shape) of them
};

/// Why cuDNN's fused SDPA does not take this shape (empty when it may): bf16/f16 on sm_80+,
/// feature dims multiples of 8 up to 128. cuDNN may still refuse it when planning.
std::string cudnn_attention_unsupported(const CudnnAttentionShape& shape, int capability);

/// The workspace bytes a shape's call needs besides cuDNN's own plan workspace: the backward's
/// f32 dq accumulator and do·o rows (0 for the forward).
std::size_t cudnn_attention_buffer_bytes(const CudnnAttentionShape& shape);

/// The operations of a shape's cuDNN graph, created and finalized on the host: what a GPU-less
/// machine can check against the real library. Returns the number of operations; throws
/// std::runtime_error naming the descriptor cuDNN refused.
int build_cudnn_attention_operations(const CudnnAttentionShape& shape);

/// libcudnn (.so.9), one handle per process (created on first use, with the device's context
/// current). Each shape's graph, engine choice and execution plan are made once and cached;
/// a call is then one cudnnBackendExecute, valid inside CUDA graph capture.
class CudnnAttention {
public:
  /// The library, or nullptr with the reason in unavailable_reason().
  static CudnnAttention* get();
  static const std::string& unavailable_reason();
  ~CudnnAttention();

  /// cudnnGetVersion(), e.g. 91900.
  std::size_t version() const;
  /// Builds the shape's graph and execution plan now (at compile time). Throws
  /// std::runtime_error naming what cuDNN refused (no engine for this graph, a descriptor).
  void prepare(const CudnnAttentionShape& shape);
  /// Device bytes the shape's call needs in `workspace` (after prepare).
  std::size_t workspace_bytes(const CudnnAttentionShape& shape);
  /// Enqueues the forward or backward on `stream` (prepares the shape first if needed).
  void run(const CudnnAttentionShape& shape, const CudnnAttentionBuffers& buffers,
           cuda::StreamHandle stream);

  struct Api;
  struct Plan;
  /// The library's entry points (build_cudnn_attention_operations uses them without a GPU).
  const Api& api() const { return *api_; }

private:
  CudnnAttention() = default;
  static std::pair<CudnnAttention*, std::string>& loaded();
  Plan& plan(const CudnnAttentionShape& shape);

  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;
  std::mutex mutex_;
  std::map<decltype(CudnnAttentionShape{}.key()), std::unique_ptr<Plan>> plans_;
};

} // namespace sinter::kernels
