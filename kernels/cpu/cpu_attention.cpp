// kernels/cpu/cpu_attention.cpp — the CPU's fused attention: blocks of query rows against tiles of
// keys in vector registers, the scores of a block kept in cache, never a [Tq, Tk] matrix
//
// Built once per x86-64 level (meson.build: baseline, v3 = AVX2+FMA, v4 = AVX-512) into the
// namespace SINTER_ATTENTION_ISA; kernels/cpu/cpu_attention_dispatch.cpp picks one at run time.
#include "kernels/cpu/cpu_attention.hpp"

#include "jit/ir/half.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

#ifndef SINTER_ATTENTION_ISA
#define SINTER_ATTENTION_ISA isa_baseline
#endif

namespace sinter::kernels::SINTER_ATTENTION_ISA {
namespace {

constexpr double masked_score = -1e9; // the op's definition (ops/attention.cpp)

/// e^x in f32 without a library call, so the loops over keys vectorise: x = n·ln2 + r with
/// |r| ≤ ln2/2, e^r from Cephes' degree-6 polynomial (within 2 ulp), 2^n built in the
/// exponent bits. Below -87.3 (masked scores among them) the result is exactly 0, as with
/// std::exp in f32; the arguments here are scores minus their maximum or log-sum-exp, ≤ 0 up
/// to rounding, so the clamp at 88 (keeping 2^n finite) never bites. f64 keeps std::exp: its
/// tests compare at 1e-12.
inline float exp_in_loop(float x) {
  const float clamped = std::min(std::max(x, -87.3f), 88.0f);
  const float scaled = clamped * 1.44269504088896341f;
  const auto n = static_cast<int32_t>(scaled + (scaled >= 0 ? 0.5f : -0.5f));
  const auto nf = static_cast<float>(n);
  const float r = (clamped - nf * 0.693359375f) - nf * -2.12194440e-4f;
  float poly = 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  const float e_r = poly * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
  // A multiply by the condition, not a branch or select: GCC vectorises this form.
  return e_r * two_n * static_cast<float>(x >= -87.3f);
}
inline double exp_in_loop(double x) { return std::exp(x); }

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

/// Register tiles: `block_rows` query rows by `lanes` columns, held in GCC vector registers
/// (two xmm on the baseline build, a ymm on AVX2, half a zmm on AVX-512).
constexpr int64_t block_rows = 4, lanes = 8;

/// Vectors travel by reference only: GCC warns that passing them by value changes the ABI
/// between the builds.
template <class Acc> struct Tile {
  typedef Acc Vec __attribute__((vector_size(lanes * sizeof(Acc))));
  static void load(Vec& v, const Acc* p) { std::memcpy(&v, p, sizeof v); }
  static void store(Acc* p, const Vec& v) { std::memcpy(p, &v, sizeof v); }
};

int64_t padded(int64_t n) { return (n + lanes - 1) / lanes * lanes; }
std::size_t count(int64_t n) { return static_cast<std::size_t>(n); }

/// out[r][c] = Σ_n w[r][n]·b[n][c] for n < inner and c < cols_pad (b's columns padded): the
/// scores (b = kᵀ), do·vᵀ (b = vᵀ), p·v and ds·k.
template <class Acc>
void rows_by(const Acc* w, int64_t ldw, int64_t inner, const Acc* b, int64_t ldb, int64_t cols_pad,
             Acc* out, int64_t ldo) {
  using T = Tile<Acc>;
  for (int64_t c0 = 0; c0 < cols_pad; c0 += lanes) {
    typename T::Vec acc[block_rows] = {};
    for (int64_t n = 0; n < inner; ++n) {
      typename T::Vec row;
      T::load(row, b + n * ldb + c0);
      for (int64_t r = 0; r < block_rows; ++r)
        acc[r] += w[r * ldw + n] * row;
    }
    for (int64_t r = 0; r < block_rows; ++r)
      T::store(out + r * ldo + c0, acc[r]);
  }
}

/// out[n][c] += Σ_r a[r][n]·b[r][c] for n < inner and c < cols_pad: dk and dv over a block.
template <class Acc>
void accumulate_transposed(const Acc* a, int64_t lda, int64_t inner, const Acc* b, int64_t ldb,
                           int64_t cols_pad, Acc* out, int64_t ldo) {
  using T = Tile<Acc>;
  for (int64_t n = 0; n < inner; ++n)
    for (int64_t c0 = 0; c0 < cols_pad; c0 += lanes) {
      typename T::Vec acc, row;
      T::load(acc, out + n * ldo + c0);
      for (int64_t r = 0; r < block_rows; ++r) {
        T::load(row, b + r * ldb + c0);
        acc += a[r * lda + n] * row;
      }
      T::store(out + n * ldo + c0, acc);
    }
}

/// Loads `rows` rows of `cols` elements into a [block_rows, ld] buffer, zero elsewhere.
template <class Acc>
void load_block(DType t, const void* base, int64_t first_row, int64_t rows, int64_t cols,
                int64_t ld, Acc* out) {
  std::fill(out, out + block_rows * ld, Acc(0));
  for (int64_t r = 0; r < rows; ++r)
    load(t, base, (first_row + r) * cols, cols, out + r * ld);
}

/// One slice's keys and values in the accumulation type, zero-padded to whole tiles: k
/// row-major with padded columns and transposed with padded keys; v row-major for the forward
/// (p·v), transposed for the backward (do·vᵀ).
template <class Acc> struct Slice {
  const int64_t tk_pad, d_pad, dv_pad;
  const bool backward;
  std::vector<Acc> k, k_t, v, v_t;
  int64_t loaded = -1;

  Slice(const AttentionProblem& p, bool for_backward)
      : tk_pad(padded(p.tk)), d_pad(padded(p.d)), dv_pad(padded(p.dv)), backward(for_backward) {}

  void load_slice(const AttentionProblem& p, const void* kp, const void* vp, int64_t b) {
    if (loaded == b) return;
    loaded = b;
    k.assign(count(p.tk * d_pad), Acc(0));
    v.assign(count(p.tk * dv_pad), Acc(0));
    for (int64_t j = 0; j < p.tk; ++j) {
      load(p.dtype, kp, (b * p.tk + j) * p.d, p.d, k.data() + j * d_pad);
      load(p.dtype, vp, (b * p.tk + j) * p.dv, p.dv, v.data() + j * dv_pad);
    }
    k_t.assign(count(p.d * tk_pad), Acc(0));
    for (int64_t j = 0; j < p.tk; ++j)
      for (int64_t c = 0; c < p.d; ++c)
        k_t[count(c * tk_pad + j)] = k[count(j * d_pad + c)];
    if (!backward) return;
    v_t.assign(count(p.dv * tk_pad), Acc(0));
    for (int64_t j = 0; j < p.tk; ++j)
      for (int64_t c = 0; c < p.dv; ++c)
        v_t[count(c * tk_pad + j)] = v[count(j * dv_pad + c)];
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

/// s[0, keys) = scale · s, masked keys at -1e9; a fully masked row scores 0 everywhere (uniform
/// weights, as with -1e9, but with an exact log-sum-exp; see ops/attention.cpp).
template <class Acc>
void finish_scores(const AttentionProblem& p, int64_t b, int64_t i, int64_t keys, Acc* s) {
  const auto scale = static_cast<Acc>(p.scale);
  for (int64_t j = 0; j < keys; ++j)
    s[j] *= scale;
  if (!p.causal && !p.mask) return;
  bool any_kept = false;
  for (int64_t j = 0; j < keys; ++j)
    any_kept = any_kept || kept(p, b, i, j);
  const auto fill = static_cast<Acc>(any_kept ? masked_score : 0.0);
  for (int64_t j = 0; j < keys; ++j)
    if (!kept(p, b, i, j)) s[j] = fill;
}

/// A block of up to block_rows query rows of one slice, starting at query row `first`.
struct RowBlock {
  int64_t slice, first, rows, keys_max;
};

RowBlock block_at(const AttentionProblem& p, int64_t row, int64_t end) {
  RowBlock blk{row / p.tq, row % p.tq, 0, 0};
  blk.rows = std::min({block_rows, end - row, p.tq - blk.first});
  blk.keys_max = keys_for_row(p, blk.first + blk.rows - 1); // grows with the row
  return blk;
}

template <class Acc>
void forward_rows(const AttentionProblem& p, const AttentionForwardArgs& a, int64_t begin,
                  int64_t end) {
  Slice<Acc> slice(p, false);
  const int64_t tk_pad = slice.tk_pad, dv_pad = slice.dv_pad;
  std::vector<Acc> q(count(block_rows * p.d)), s(count(block_rows * tk_pad)),
      o(count(block_rows * dv_pad));
  Acc total[block_rows];
  for (int64_t row = begin; row < end;) {
    const RowBlock blk = block_at(p, row, end);
    slice.load_slice(p, a.k, a.v, blk.slice);
    load_block(p.dtype, a.q, row, blk.rows, p.d, p.d, q.data());
    const int64_t n_pad = padded(blk.keys_max);
    rows_by(q.data(), p.d, p.d, slice.k_t.data(), tk_pad, n_pad, s.data(), tk_pad);
    for (int64_t r = 0; r < block_rows; ++r) {
      Acc* sr = s.data() + r * tk_pad;
      if (r >= blk.rows) {
        std::fill(sr, sr + n_pad, Acc(0));
        continue;
      }
      const int64_t keys = keys_for_row(p, blk.first + r);
      finish_scores(p, blk.slice, blk.first + r, keys, sr);
      const Acc top = *std::max_element(sr, sr + keys);
      for (int64_t j = 0; j < keys; ++j)
        sr[j] = exp_in_loop(sr[j] - top);
      std::fill(sr + keys, sr + n_pad, Acc(0));
      total[r] = 0;
      for (int64_t j = 0; j < keys; ++j)
        total[r] += sr[j];
      if (a.lse) {
        const Acc lse = top + std::log(total[r]);
        store(p.lse_dtype, a.lse, row + r, 1, &lse);
      }
    }
    if (a.o) {
      rows_by(s.data(), tk_pad, blk.keys_max, slice.v.data(), dv_pad, dv_pad, o.data(), dv_pad);
      for (int64_t r = 0; r < blk.rows; ++r) {
        Acc* o_r = o.data() + r * dv_pad;
        const Acc inverse = Acc(1) / total[r];
        for (int64_t c = 0; c < p.dv; ++c)
          o_r[c] *= inverse;
        store(p.dtype, a.o, (row + r) * p.dv, p.dv, o_r);
      }
    }
    row += blk.rows;
  }
}

template <class Acc>
void backward_slices(const AttentionProblem& p, const AttentionBackwardArgs& a, int64_t begin,
                     int64_t end) {
  Slice<Acc> slice(p, true);
  const int64_t tk_pad = slice.tk_pad, d_pad = slice.d_pad, dv_pad = slice.dv_pad;
  std::vector<Acc> q(count(block_rows * d_pad)), o(count(block_rows * dv_pad)),
      d_o(count(block_rows * dv_pad)), s(count(block_rows * tk_pad)),
      dp(count(block_rows * tk_pad)), dq(count(block_rows * d_pad)), dk(count(p.tk * d_pad)),
      dv(count(p.tk * dv_pad));
  const auto scale = static_cast<Acc>(p.scale);
  for (int64_t b = begin; b < end; ++b) {
    slice.load_slice(p, a.k, a.v, b);
    std::fill(dk.begin(), dk.end(), Acc(0));
    std::fill(dv.begin(), dv.end(), Acc(0));
    for (int64_t row = b * p.tq; row < (b + 1) * p.tq;) {
      const RowBlock blk = block_at(p, row, (b + 1) * p.tq);
      const int64_t n_pad = padded(blk.keys_max);
      load_block(p.dtype, a.q, row, blk.rows, p.d, d_pad, q.data());
      load_block(p.dtype, a.o, row, blk.rows, p.dv, dv_pad, o.data());
      load_block(p.dtype, a.d_o, row, blk.rows, p.dv, dv_pad, d_o.data());
      rows_by(q.data(), d_pad, p.d, slice.k_t.data(), tk_pad, n_pad, s.data(), tk_pad);
      // dp = do · vᵀ
      rows_by(d_o.data(), dv_pad, p.dv, slice.v_t.data(), tk_pad, n_pad, dp.data(), tk_pad);
      for (int64_t r = 0; r < block_rows; ++r) {
        Acc *sr = s.data() + r * tk_pad, *dpr = dp.data() + r * tk_pad;
        if (r >= blk.rows) { // padding rows add nothing to dk and dv
          std::fill(sr, sr + n_pad, Acc(0));
          std::fill(dpr, dpr + n_pad, Acc(0));
          continue;
        }
        const int64_t i = blk.first + r, keys = keys_for_row(p, i);
        Acc lse, row_dot = 0;
        load(p.lse_dtype, a.lse, row + r, 1, &lse);
        for (int64_t c = 0; c < p.dv; ++c)
          row_dot += d_o[count(r * dv_pad + c)] * o[count(r * dv_pad + c)];
        finish_scores(p, b, i, keys, sr);
        for (int64_t j = 0; j < keys; ++j)
          sr[j] = exp_in_loop(sr[j] - lse); // now p
        std::fill(sr + keys, sr + n_pad, Acc(0));
        // ds = p ∘ (dp - rowsum(do ∘ o)) · scale, zero where masked (a masked score is
        // constant); dp then holds ds.
        for (int64_t j = 0; j < keys; ++j)
          dpr[j] = sr[j] * (dpr[j] - row_dot) * scale;
        std::fill(dpr + keys, dpr + n_pad, Acc(0));
        if (p.causal || p.mask)
          for (int64_t j = 0; j < keys; ++j)
            if (!kept(p, b, i, j)) dpr[j] = 0;
      }
      // dv += pᵀ · do; dk += dsᵀ · q; dq = ds · k.
      accumulate_transposed(s.data(), tk_pad, blk.keys_max, d_o.data(), dv_pad, dv_pad, dv.data(),
                            dv_pad);
      accumulate_transposed(dp.data(), tk_pad, blk.keys_max, q.data(), d_pad, d_pad, dk.data(),
                            d_pad);
      if (a.dq) {
        rows_by(dp.data(), tk_pad, blk.keys_max, slice.k.data(), d_pad, d_pad, dq.data(), d_pad);
        for (int64_t r = 0; r < blk.rows; ++r)
          store(p.dtype, a.dq, (row + r) * p.d, p.d, dq.data() + r * d_pad);
      }
      row += blk.rows;
    }
    for (int64_t j = 0; j < p.tk; ++j) {
      if (a.dk) store(p.dtype, a.dk, (b * p.tk + j) * p.d, p.d, dk.data() + j * d_pad);
      if (a.dv) store(p.dtype, a.dv, (b * p.tk + j) * p.dv, p.dv, dv.data() + j * dv_pad);
    }
  }
}

} // namespace

void forward(const AttentionProblem& p, const AttentionForwardArgs& args, int64_t begin,
             int64_t end) {
  if (p.tk == 0) throw std::invalid_argument("sinter: attention over zero keys");
  if (p.dtype == DType::f64)
    forward_rows<double>(p, args, begin, end);
  else
    forward_rows<float>(p, args, begin, end);
}

void backward(const AttentionProblem& p, const AttentionBackwardArgs& args, int64_t begin,
              int64_t end) {
  if (p.tk == 0) throw std::invalid_argument("sinter: attention over zero keys");
  if (p.dtype == DType::f64)
    backward_slices<double>(p, args, begin, end);
  else
    backward_slices<float>(p, args, begin, end);
}

} // namespace sinter::kernels::SINTER_ATTENTION_ISA
