// kernels/cpu_attention.cpp — the CPU's fused attention: online over one query row at a time,
// keys held transposed so every inner loop is a vectorisable axpy
#include "kernels/cpu_attention.hpp"

#include "jit/ir/half.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace sinter::kernels {
namespace {

constexpr double masked_score = -1e9; // the op's definition (ops/attention.cpp)

template <class Acc> void load(DType t, const void* base, int64_t offset, int64_t n, Acc* out) {
  switch (t) {
  case DType::f32: {
    const float* p = static_cast<const float*>(base) + offset;
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<Acc>(p[i]);
    return;
  }
  case DType::f64: {
    const double* p = static_cast<const double*>(base) + offset;
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<Acc>(p[i]);
    return;
  }
  case DType::bf16: {
    const uint16_t* p = static_cast<const uint16_t*>(base) + offset;
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<Acc>(bf16_value(p[i]));
    return;
  }
  case DType::f16: {
    const uint16_t* p = static_cast<const uint16_t*>(base) + offset;
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<Acc>(f16_value(p[i]));
    return;
  }
  default: break;
  }
  throw std::invalid_argument("sinter: fused attention on " + std::string(dtype_name(t)) +
                              " — q, k and v must be floating point");
}

template <class Acc> void store(DType t, void* base, int64_t offset, int64_t n, const Acc* in) {
  switch (t) {
  case DType::f32: {
    float* p = static_cast<float*>(base) + offset;
    for (int64_t i = 0; i < n; ++i)
      p[i] = static_cast<float>(in[i]);
    return;
  }
  case DType::f64: {
    double* p = static_cast<double*>(base) + offset;
    for (int64_t i = 0; i < n; ++i)
      p[i] = static_cast<double>(in[i]);
    return;
  }
  case DType::bf16: {
    uint16_t* p = static_cast<uint16_t*>(base) + offset;
    for (int64_t i = 0; i < n; ++i)
      p[i] = bf16_bits(static_cast<float>(in[i]));
    return;
  }
  case DType::f16: {
    uint16_t* p = static_cast<uint16_t*>(base) + offset;
    for (int64_t i = 0; i < n; ++i)
      p[i] = f16_bits(static_cast<float>(in[i]));
    return;
  }
  default: break;
  }
  throw std::invalid_argument("sinter: fused attention cannot store " + std::string(dtype_name(t)));
}

/// One slice's operands in the accumulation type; k (and v, for the backward) also transposed
/// so that a row of scores is a sum of axpys over the keys.
template <class Acc> struct Slice {
  std::vector<Acc> k, k_t, v, v_t;
  int64_t loaded = -1;

  void load_slice(const AttentionProblem& p, const void* kp, const void* vp, int64_t b,
                  bool transposed_v) {
    if (loaded == b) return;
    loaded = b;
    k.resize(static_cast<std::size_t>(p.tk * p.d));
    v.resize(static_cast<std::size_t>(p.tk * p.dv));
    load(p.dtype, kp, b * p.tk * p.d, p.tk * p.d, k.data());
    load(p.dtype, vp, b * p.tk * p.dv, p.tk * p.dv, v.data());
    k_t.resize(k.size());
    for (int64_t j = 0; j < p.tk; ++j)
      for (int64_t c = 0; c < p.d; ++c)
        k_t[c * p.tk + j] = k[j * p.d + c];
    if (!transposed_v) return;
    v_t.resize(v.size());
    for (int64_t j = 0; j < p.tk; ++j)
      for (int64_t c = 0; c < p.dv; ++c)
        v_t[c * p.tk + j] = v[j * p.dv + c];
  }
};

/// Keys a row needs: with a causal mask alone, keys after the row score -1e9 and weigh exactly
/// 0 (key 0 is always kept), so they are skipped; with a mask, a fully masked row averages
/// every key, so all are visited.
int64_t keys_for_row(const AttentionProblem& p, int64_t i) {
  return p.causal && !p.mask ? std::min(p.tk, i + 1) : p.tk;
}

bool kept(const AttentionProblem& p, int64_t b, int64_t i, int64_t j) {
  if (p.causal && j > i) return false;
  return !p.mask || p.mask[p.mask_offset[b] + i * p.mask_row_stride + j * p.mask_col_stride] != 0;
}

/// s[0, keys) = scale · q · kⱼ, masked keys at -1e9.
template <class Acc>
void row_scores(const AttentionProblem& p, const Slice<Acc>& slice, const Acc* q, int64_t b,
                int64_t i, int64_t keys, Acc* s) {
  std::fill(s, s + keys, Acc(0));
  for (int64_t c = 0; c < p.d; ++c) {
    const Acc qc = q[c];
    const Acc* kc = slice.k_t.data() + c * p.tk;
    for (int64_t j = 0; j < keys; ++j)
      s[j] += qc * kc[j];
  }
  const auto scale = static_cast<Acc>(p.scale);
  for (int64_t j = 0; j < keys; ++j)
    s[j] *= scale;
  if (!p.causal && !p.mask) return;
  // A fully masked row scores 0 everywhere (uniform weights, as with -1e9, but with an exact
  // log-sum-exp; see ops/attention.cpp).
  bool any_kept = false;
  for (int64_t j = 0; j < keys; ++j)
    any_kept = any_kept || kept(p, b, i, j);
  const auto fill = static_cast<Acc>(any_kept ? masked_score : 0.0);
  for (int64_t j = 0; j < keys; ++j)
    if (!kept(p, b, i, j)) s[j] = fill;
}

template <class Acc>
void forward_rows(const AttentionProblem& p, const AttentionForwardArgs& a, int64_t begin,
                  int64_t end) {
  Slice<Acc> slice;
  std::vector<Acc> q(static_cast<std::size_t>(p.d)), s(static_cast<std::size_t>(p.tk)),
      o(static_cast<std::size_t>(p.dv));
  for (int64_t row = begin; row < end; ++row) {
    int64_t b = row / p.tq, i = row % p.tq;
    slice.load_slice(p, a.k, a.v, b, false);
    load(p.dtype, a.q, row * p.d, p.d, q.data());
    int64_t keys = keys_for_row(p, i);
    row_scores(p, slice, q.data(), b, i, keys, s.data());
    Acc top = *std::max_element(s.begin(), s.begin() + keys), total = 0;
    for (int64_t j = 0; j < keys; ++j)
      total += (s[j] = std::exp(s[j] - top));
    if (a.lse) {
      Acc lse = top + std::log(total);
      store(p.lse_dtype, a.lse, row, 1, &lse);
    }
    if (!a.o) continue;
    std::fill(o.begin(), o.end(), Acc(0));
    for (int64_t j = 0; j < keys; ++j) {
      const Acc weight = s[j] / total;
      const Acc* vj = slice.v.data() + j * p.dv;
      for (int64_t c = 0; c < p.dv; ++c)
        o[c] += weight * vj[c];
    }
    store(p.dtype, a.o, row * p.dv, p.dv, o.data());
  }
}

template <class Acc>
void backward_slices(const AttentionProblem& p, const AttentionBackwardArgs& a, int64_t begin,
                     int64_t end) {
  Slice<Acc> slice;
  auto n = [](int64_t x) { return static_cast<std::size_t>(x); };
  std::vector<Acc> q(n(p.tq * p.d)), o(n(p.dv)), d_o(n(p.dv)), s(n(p.tk)), dp(n(p.tk)), dq(n(p.d)),
      dk(n(p.tk * p.d)), dv(n(p.tk * p.dv));
  const auto scale = static_cast<Acc>(p.scale);
  for (int64_t b = begin; b < end; ++b) {
    slice.load_slice(p, a.k, a.v, b, true);
    load(p.dtype, a.q, b * p.tq * p.d, p.tq * p.d, q.data());
    std::fill(dk.begin(), dk.end(), Acc(0));
    std::fill(dv.begin(), dv.end(), Acc(0));
    for (int64_t i = 0; i < p.tq; ++i) {
      int64_t row = b * p.tq + i, keys = keys_for_row(p, i);
      const Acc* qi = q.data() + i * p.d;
      load(p.dtype, a.o, row * p.dv, p.dv, o.data());
      load(p.dtype, a.d_o, row * p.dv, p.dv, d_o.data());
      Acc lse;
      load(p.lse_dtype, a.lse, row, 1, &lse);
      Acc row_dot = 0;
      for (int64_t c = 0; c < p.dv; ++c)
        row_dot += d_o[c] * o[c];
      row_scores(p, slice, qi, b, i, keys, s.data());
      for (int64_t j = 0; j < keys; ++j)
        s[j] = std::exp(s[j] - lse); // now p
      // dv += pᵀ · do; dp = do · vᵀ.
      std::fill(dp.begin(), dp.begin() + keys, Acc(0));
      for (int64_t c = 0; c < p.dv; ++c) {
        const Acc g = d_o[c];
        const Acc* vc = slice.v_t.data() + c * p.tk;
        for (int64_t j = 0; j < keys; ++j)
          dp[j] += g * vc[j];
      }
      for (int64_t j = 0; j < keys; ++j) {
        const Acc pj = s[j];
        Acc* dvj = dv.data() + j * p.dv;
        for (int64_t c = 0; c < p.dv; ++c)
          dvj[c] += pj * d_o[c];
      }
      // ds = p ∘ (dp - rowsum(do ∘ o)) · scale, zero where masked (a masked score is constant).
      for (int64_t j = 0; j < keys; ++j)
        dp[j] = s[j] * (dp[j] - row_dot) * scale;
      if (p.causal || p.mask)
        for (int64_t j = 0; j < keys; ++j)
          if (!kept(p, b, i, j)) dp[j] = 0;
      std::fill(dq.begin(), dq.end(), Acc(0));
      for (int64_t j = 0; j < keys; ++j) {
        const Acc ds = dp[j];
        const Acc* kj = slice.k.data() + j * p.d;
        Acc* dkj = dk.data() + j * p.d;
        for (int64_t c = 0; c < p.d; ++c) {
          dq[c] += ds * kj[c];
          dkj[c] += ds * qi[c];
        }
      }
      if (a.dq) store(p.dtype, a.dq, row * p.d, p.d, dq.data());
    }
    if (a.dk) store(p.dtype, a.dk, b * p.tk * p.d, p.tk * p.d, dk.data());
    if (a.dv) store(p.dtype, a.dv, b * p.tk * p.dv, p.tk * p.dv, dv.data());
  }
}

} // namespace

void attention_forward(const AttentionProblem& p, const AttentionForwardArgs& args, int64_t begin,
                       int64_t end) {
  if (p.tk == 0) throw std::invalid_argument("sinter: attention over zero keys");
  if (p.dtype == DType::f64)
    forward_rows<double>(p, args, begin, end);
  else
    forward_rows<float>(p, args, begin, end);
}

void attention_backward(const AttentionProblem& p, const AttentionBackwardArgs& args, int64_t begin,
                        int64_t end) {
  if (p.tk == 0) throw std::invalid_argument("sinter: attention over zero keys");
  if (p.dtype == DType::f64)
    backward_slices<double>(p, args, begin, end);
  else
    backward_slices<float>(p, args, begin, end);
}

} // namespace sinter::kernels
