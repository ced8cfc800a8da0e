// ops/attention.cpp — attention: the user's composite and the fused primitives it lowers to
// (forward, row log-sum-exp, gradients), each with a decomposition for backends without them
#include "ops/attention_attrs.hpp"
#include "ops/reference.hpp"
#include "ops/type_rules.hpp"

#include <algorithm>
#include <cmath>

namespace sinter::op_defs {
namespace {

using Args = std::span<const F64Tensor>;
using attention_attrs::heads_rows_swap;
using attention_attrs::token_major_shape;
using attention_attrs::writes_packed;
using attention_attrs::writes_token_major;

/// Score given to masked-out keys: a fully masked row then averages v (no NaN). The fused ops
/// give a fully masked row's keys 0 instead (the same uniform weights): its log-sum-exp is then
/// log(Tk) rather than -1e9 + log(Tk), which f32 cannot tell from -1e9, and exp(s - lse) in the
/// backward stays exact.
constexpr double masked_score = -1e9;

/// The checks shared by every attention op on q, k, v and the optional mask; returns the
/// output shape [..., Tq, Dv].
Shape check_attention_operands(std::span<const TensorType> qkv, const TensorType* mask) {
  type_rules::require_same_dtype(qkv);
  type_rules::require_float(qkv[0], "q");
  const Shape &q = qkv[0].shape, &k = qkv[1].shape, &v = qkv[2].shape;
  std::size_t r = q.size();
  if (r < 2 || k.size() != r || v.size() != r)
    type_rules::fail("q, k and v need one rank >= 2, got " + to_string(q) + ", " + to_string(k) +
                     ", " + to_string(v));
  if (!std::equal(q.begin(), q.end() - 2, k.begin()) ||
      !std::equal(q.begin(), q.end() - 2, v.begin()))
    type_rules::fail("q, k and v batch dims differ: " + to_string(q) + ", " + to_string(k) + ", " +
                     to_string(v));
  if (q[r - 1] != k[r - 1])
    type_rules::fail("q and k feature dims differ: " + std::to_string(q[r - 1]) + " vs " +
                     std::to_string(k[r - 1]));
  if (k[r - 2] != v[r - 2])
    type_rules::fail("k has " + std::to_string(k[r - 2]) + " keys, v " + std::to_string(v[r - 2]) +
                     " values");
  if (mask) {
    if (mask->dtype != DType::boolean)
      type_rules::fail("the mask must be bool, got " + std::string(dtype_name(mask->dtype)));
    Shape scores = q;
    scores.back() = k[r - 2];
    const Shape& m = mask->shape;
    bool fits = m.size() <= r;
    for (std::size_t i = 0; fits && i < m.size(); ++i)
      fits = m[m.size() - 1 - i] == 1 || m[m.size() - 1 - i] == scores[r - 1 - i];
    if (!fits)
      type_rules::fail("the mask " + to_string(m) + " does not broadcast to the scores " +
                       to_string(scores));
  }
  Shape out = q;
  out.back() = v[r - 1];
  return out;
}

/// What scores, softmax and the log-sum-exp are computed in: f64 stays f64, the rest f32.
DType accumulation_type(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

double scale_of(const Attrs& a, int64_t feature_dim) {
  return a.real != 0.0 ? a.real : 1.0 / std::sqrt(static_cast<double>(feature_dim));
}

Shape rows_shape(const Shape& q) { return Shape(q.begin(), q.end() - 1); }

// ---- decompositions (the IR a backend without fused attention runs) ----

/// Whether query i may attend to key j: causal and the mask combined; a null Value when all may.
Value attend(const Value& q, const Value& k, const Attrs& a, const Value& mask) {
  int64_t tq = q.shape()[q.shape().size() - 2], tk = k.shape()[k.shape().size() - 2];
  Value keep;
  if (a.flag) {
    Graph& g = *q.graph;
    keep = less_equal(iota(g, DType::i32, {tq, tk}, 1), iota(g, DType::i32, {tq, tk}, 0));
  }
  if (mask) {
    Shape scores = q.shape();
    scores.back() = tk;
    Value m = broadcast_to(mask, scores);
    if (keep)
      keep = emit(OpId::where, {broadcast_to(keep, scores), m, broadcast_to(keep, scores)});
    else
      keep = m;
  }
  return keep;
}

/// scale · q · kᵀ in the accumulation type, masked scores replaced by `masked_score` (0 in a
/// fully masked row).
Value decomposed_scores(const Value& q, const Value& k, const Attrs& a, const Value& mask) {
  DType acc = accumulation_type(q.dtype());
  Value s = matmul(q, transpose(k, -2, -1));
  if (s.dtype() != acc) s = cast(s, acc);
  s = s * scale_of(a, q.shape().back());
  Value keep = attend(q, k, a, mask);
  if (!keep) return s;
  if (!mask) return where(keep, s, masked_score); // causal alone keeps key 0 in every row
  Value any_kept = max(cast(keep, acc), {-1}, true);
  return where(keep, s, any_kept * masked_score);
}

Value optional_mask(std::span<const Value> in, std::size_t at) {
  return in.size() > at ? in[at] : Value{};
}

Value decomposed_forward(std::span<const Value> in, const Attrs& a) {
  Value q = in[0], k = in[1], v = in[2];
  Value p = softmax(decomposed_scores(q, k, a, optional_mask(in, 3)), -1);
  return matmul(p.dtype() == q.dtype() ? p : cast(p, q.dtype()), v);
}

Value decomposed_lse(std::span<const Value> in, const Attrs& a) {
  return logsumexp(decomposed_scores(in[0], in[1], a, optional_mask(in, 3)), {-1});
}

/// The flash-attention backward from saved o and lse: p = exp(s - lse), dv = pᵀ·do,
/// ds = p ∘ (do·vᵀ - rowsum(do ∘ o)), dq = scale · ds·k, dk = scale · dsᵀ·q.
Value decomposed_gradient(std::span<const Value> in, const Attrs& a) {
  Value q = in[0], k = in[1], v = in[2], o = in[3], lse = in[4], d_o = in[5];
  Value mask = optional_mask(in, 6);
  DType low = q.dtype(), acc = accumulation_type(low);
  auto to = [](Value x, DType t) { return x.dtype() == t ? x : cast(x, t); };
  Shape lse_column = lse.shape();
  lse_column.push_back(1);
  Value p = exp(decomposed_scores(q, k, a, mask) - reshape(to(lse, acc), lse_column));
  if (a.ints[0] == 2) return matmul(transpose(to(p, low), -2, -1), d_o);
  Value dp = to(matmul(d_o, transpose(v, -2, -1)), acc);
  Value row_dot = sum(to(d_o, acc) * to(o, acc), {-1}, true);
  Value ds = p * (dp - row_dot);
  if (Value keep = attend(q, k, a, mask)) ds = where(keep, ds, 0.0);
  ds = to(ds * scale_of(a, q.shape().back()), low);
  if (a.ints[0] == 0) return matmul(ds, k);
  return matmul(transpose(ds, -2, -1), q);
}

/// The three decomposed gradients, packed.
Value decomposed_packed_gradient(std::span<const Value> in, const Attrs& a) {
  std::vector<Value> grads;
  for (int64_t which :
       {attention_attrs::grad_q, attention_attrs::grad_k, attention_attrs::grad_v}) {
    Attrs one = a;
    one.ints = {which};
    grads.push_back(decomposed_gradient(in, one));
  }
  return attention_attrs::pack_gradients(grads);
}

// ---- float64 references (independent of the decompositions) ----

/// One (batch, query row) of attention in float64: the masked, scaled scores of every key.
struct ReferenceRows {
  const F64Tensor &q, &k;
  const F64Tensor* mask;
  const Attrs& attrs;
  int64_t tq, tk, d, batches;
  double scale;
  Shape scores_shape;

  ReferenceRows(const F64Tensor& q_, const F64Tensor& k_, const F64Tensor* mask_, const Attrs& a)
      : q(q_), k(k_), mask(mask_), attrs(a) {
    std::size_t r = q.shape.size();
    tq = q.shape[r - 2];
    d = q.shape[r - 1];
    tk = k.shape[r - 2];
    batches = numel(q.shape) / std::max<int64_t>(1, tq * d);
    scale = scale_of(a, d);
    scores_shape = q.shape;
    scores_shape.back() = tk;
  }
  bool keeps(int64_t b, int64_t i, int64_t j) const {
    bool keep = !(attrs.flag && j > i);
    if (mask)
      keep = keep && reference::broadcast_at(
                         *mask, reference::unravel((b * tq + i) * tk + j, scores_shape)) != 0.0;
    return keep;
  }
  std::vector<double> scores(int64_t b, int64_t i) const {
    std::vector<double> s(static_cast<std::size_t>(tk));
    bool any_kept = false;
    for (int64_t j = 0; j < tk; ++j)
      any_kept = any_kept || keeps(b, i, j);
    for (int64_t j = 0; j < tk; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c)
        dot += q.data[(b * tq + i) * d + c] * k.data[(b * tk + j) * d + c];
      s[j] = keeps(b, i, j) ? dot * scale : any_kept ? masked_score : 0.0;
    }
    return s;
  }
  double log_sum_exp(const std::vector<double>& s) const {
    double top = *std::max_element(s.begin(), s.end()), total = 0;
    for (double x : s)
      total += std::exp(x - top);
    return top + std::log(total);
  }
};

F64Tensor reference_forward(Args in, const Attrs& a, const TensorType& result) {
  ReferenceRows rows(in[0], in[1], in.size() > 3 ? &in[3] : nullptr, a);
  const F64Tensor& v = in[2];
  int64_t dv = v.shape.back();
  F64Tensor out{result.shape, std::vector<double>(numel(result.shape))};
  for (int64_t b = 0; b < rows.batches; ++b)
    for (int64_t i = 0; i < rows.tq; ++i) {
      std::vector<double> s = rows.scores(b, i);
      double lse = rows.log_sum_exp(s);
      for (int64_t c = 0; c < dv; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < rows.tk; ++j)
          acc += std::exp(s[j] - lse) * v.data[(b * rows.tk + j) * dv + c];
        out.data[(b * rows.tq + i) * dv + c] = acc;
      }
    }
  return out;
}

/// `x` [..., H, T, C] laid out token-major, [..., T, H, C].
F64Tensor to_token_major(const F64Tensor& x) {
  std::size_t r = x.shape.size();
  int64_t h = x.shape[r - 3], t = x.shape[r - 2], c = x.shape[r - 1];
  int64_t lead = numel(x.shape) / std::max<int64_t>(1, h * t * c);
  F64Tensor out{token_major_shape(x.shape), std::vector<double>(x.data.size())};
  for (int64_t b = 0; b < lead; ++b)
    for (int64_t head = 0; head < h; ++head)
      for (int64_t row = 0; row < t; ++row)
        for (int64_t col = 0; col < c; ++col)
          out.data[((b * t + row) * h + head) * c + col] =
              x.data[((b * h + head) * t + row) * c + col];
  return out;
}

// The CPU kernel works in tiles of 4 query rows by 8 keys or columns (kernels/cpu_attention):
// the causal case spans several row blocks, key tiles and a partial column tile.
std::vector<OpTestCase> forward_cases() {
  return {{{TestOperand{DType::f64, {2, 3, 4}}, TestOperand{DType::f64, {2, 5, 4}},
            TestOperand{DType::f64, {2, 5, 3}}},
           Attrs{}},
          {{TestOperand{DType::f64, {1, 2, 10, 5}}, TestOperand{DType::f64, {1, 2, 10, 5}},
            TestOperand{DType::f64, {1, 2, 10, 12}}},
           Attrs{.real = 0.5, .flag = true}},
          {{TestOperand{DType::f64, {2, 3, 4}}, TestOperand{DType::f64, {2, 3, 4}},
            TestOperand{DType::f64, {2, 3, 2}}, TestOperand{DType::boolean, {3, 3}, 0, 2}},
           Attrs{}}};
}

TensorType forward_type(std::span<const TensorType> in, const Attrs& a) {
  if (in.size() != 3 && in.size() != 4)
    type_rules::fail("attention takes q, k, v and an optional mask, got " +
                     std::to_string(in.size()) + " operands");
  if (!a.ints.empty()) type_rules::fail("attention takes no integer attributes");
  return TensorType{in[0].dtype,
                    check_attention_operands(in.subspan(0, 3), in.size() == 4 ? &in[3] : nullptr)};
}

/// The fused forward's type: attention's, token-major when its ints ask for it.
TensorType fused_forward_type(std::span<const TensorType> in, const Attrs& a) {
  Attrs head_major = a;
  head_major.ints.clear();
  TensorType t = forward_type(in, head_major);
  if (a.ints.empty()) return t;
  if (!writes_token_major(a))
    type_rules::fail("fused_attention's ints are {} (a head-major result) or {" +
                     std::to_string(attention_attrs::token_major) + "} (token-major)");
  if (t.shape.size() < 3)
    type_rules::fail("a token-major attention result needs q of rank 3 or more ([..., H, T, D]), "
                     "got " +
                     to_string(in[0].shape));
  t.shape = token_major_shape(t.shape);
  return t;
}

/// OpDef::row_wise of the fused forward and its log-sum-exp: dim 0 is a batch dim of q, k and
/// v (rank >= 3, and >= 4 for a token-major result, whose dim 0 is otherwise the rows'); a mask
/// is taken the same way or is the same for every row.
bool attention_rows(std::span<const TensorType> in, std::span<const bool> taken, const Attrs& a,
                    const TensorType& result, int64_t) {
  if (in[0].shape.size() < (writes_token_major(a) ? 4u : 3u) || result.shape.empty() ||
      in[0].shape[0] != result.shape[0])
    return false;
  for (std::size_t i = 0; i < 3; ++i)
    if (!taken[i] || in[i].shape.size() != in[0].shape.size() || in[i].shape[0] != in[0].shape[0])
      return false;
  if (in.size() == 4)
    return taken[3] ? row_rules::rows_align(in[3], TensorType{in[0].dtype, in[0].shape})
                    : row_rules::same_for_every_row(in[3], TensorType{in[0].dtype, in[0].shape});
  return true;
}

} // namespace

// Operands: q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv], optionally a bool mask that
// broadcasts to [..., Tq, Tk]; attrs: real = scale (0: 1/√D), flag = causal. Lowers to the
// fused primitive; a backend without it runs that primitive's decomposition.
const OpDef attention_op{
    .arity = -1,
    .precision = Precision::low,
    .infer = forward_type,
    .lower = [](std::span<const Value> in,
                const Attrs& a) { return emit(OpId::fused_attention, in, a); },
    .reference =
        [](Args in, const Attrs& a, const TensorType& result) {
          // Written out plainly (softmax then the weighted sum), apart from the fused
          // primitives' log-sum-exp form.
          const F64Tensor &q = in[0], &k = in[1], &v = in[2];
          std::size_t r = q.shape.size();
          int64_t tq = q.shape[r - 2], d = q.shape[r - 1], tk = k.shape[r - 2], dv = v.shape[r - 1];
          int64_t batches = numel(q.shape) / std::max<int64_t>(1, tq * d);
          double scale = scale_of(a, d);
          F64Tensor out{result.shape, std::vector<double>(numel(result.shape))};
          Shape scores_shape = q.shape;
          scores_shape.back() = tk;
          std::vector<double> s(static_cast<std::size_t>(tk));
          for (int64_t b = 0; b < batches; ++b)
            for (int64_t i = 0; i < tq; ++i) {
              double top = -INFINITY;
              for (int64_t j = 0; j < tk; ++j) {
                double dot = 0;
                for (int64_t c = 0; c < d; ++c)
                  dot += q.data[(b * tq + i) * d + c] * k.data[(b * tk + j) * d + c];
                bool keep = !(a.flag && j > i);
                if (in.size() == 4) {
                  std::vector<int64_t> idx =
                      reference::unravel((b * tq + i) * tk + j, scores_shape);
                  keep = keep && reference::broadcast_at(in[3], idx) != 0.0;
                }
                s[j] = keep ? dot * scale : masked_score;
                top = std::max(top, s[j]);
              }
              double total = 0;
              for (double& x : s)
                total += (x = std::exp(x - top));
              for (int64_t c = 0; c < dv; ++c) {
                double acc = 0;
                for (int64_t j = 0; j < tk; ++j)
                  acc += s[j] / total * v.data[(b * tk + j) * dv + c];
                out.data[(b * tq + i) * dv + c] = acc;
              }
            }
          return out;
        },
    .test_cases = forward_cases,
};

// The fused forward: same operands, attributes and result as attention. Backends with a fused
// kernel never write the [Tq, Tk] scores; its gradient saves only the row log-sum-exp.
const OpDef fused_attention_op{
    .arity = -1,
    .precision = Precision::low,
    .kernel_kind = KernelKind::attention,
    .infer = fused_forward_type,
    .grad =
        [](const GradArgs& a) {
          std::vector<Value> shared(a.operands.begin(), a.operands.end());
          Attrs head_major = a.attrs;
          head_major.ints.clear();
          Value lse = emit(OpId::fused_attention_lse, shared, head_major);
          Value o = a.result, d_o = a.cotangent;
          if (writes_token_major(a.attrs)) { // the gradient reads both head-major
            o = permute(o, heads_rows_swap(o.shape().size()));
            d_o = permute(d_o, heads_rows_swap(d_o.shape().size()));
          }
          std::vector<Value> operands{a.operands[0], a.operands[1], a.operands[2], o, lse, d_o};
          if (a.operands.size() == 4) operands.push_back(a.operands[3]);
          std::vector<Value> grads;
          for (int64_t which = 0; which < 3; ++which) {
            Attrs attrs = head_major;
            attrs.ints = {which};
            grads.push_back(emit(OpId::fused_attention_grad, operands, attrs));
          }
          if (a.operands.size() == 4) grads.push_back(Value{});
          return grads;
        },
    .lower =
        [](std::span<const Value> in, const Attrs& a) {
          Value o = decomposed_forward(in, a);
          return writes_token_major(a) ? permute(o, heads_rows_swap(o.shape().size())) : o;
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType& result) {
          if (!writes_token_major(a)) return reference_forward(in, a, result);
          TensorType head_major{result.dtype, token_major_shape(result.shape)};
          return to_token_major(reference_forward(in, a, head_major));
        },
    .test_cases =
        [] {
          std::vector<OpTestCase> cases = forward_cases();
          for (const OpTestCase& head_major : forward_cases()) {
            OpTestCase c = head_major;
            c.attrs.ints = {attention_attrs::token_major};
            cases.push_back(c);
          }
          return cases;
        },
    .row_wise = attention_rows,
};

// The log-sum-exp of each query row's masked, scaled scores: [..., Tq] in f32 (f64 for f64
// operands). Takes v too, so that it shares the forward's operands and kernel.
const OpDef fused_attention_lse_op{
    .arity = -1,
    .differentiable = false,
    .kernel_kind = KernelKind::attention,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          TensorType o = forward_type(in, a);
          return TensorType{accumulation_type(o.dtype), rows_shape(in[0].shape)};
        },
    .lower = decomposed_lse,
    .reference =
        [](Args in, const Attrs& a, const TensorType& result) {
          ReferenceRows rows(in[0], in[1], in.size() > 3 ? &in[3] : nullptr, a);
          F64Tensor out{result.shape, std::vector<double>(numel(result.shape))};
          for (int64_t b = 0; b < rows.batches; ++b)
            for (int64_t i = 0; i < rows.tq; ++i)
              out.data[b * rows.tq + i] = rows.log_sum_exp(rows.scores(b, i));
          return out;
        },
    .test_cases = forward_cases,
    .row_wise = attention_rows,
};

namespace {

/// One gradient (`which`: 0 q, 1 k, 2 v) of attention in float64 from its saved o and lse.
F64Tensor reference_gradient(Args in, const Attrs& a, int64_t which) {
  ReferenceRows rows(in[0], in[1], in.size() > 6 ? &in[6] : nullptr, a);
  const F64Tensor &q = in[0], &k = in[1], &v = in[2], &o = in[3], &lse = in[4], &d_o = in[5];
  int64_t d = rows.d, dv = v.shape.back(), tq = rows.tq, tk = rows.tk;
  F64Tensor out{in[static_cast<std::size_t>(which)].shape,
                std::vector<double>(numel(in[static_cast<std::size_t>(which)].shape), 0.0)};
  for (int64_t b = 0; b < rows.batches; ++b)
    for (int64_t i = 0; i < tq; ++i) {
      std::vector<double> s = rows.scores(b, i);
      double row_dot = 0;
      for (int64_t c = 0; c < dv; ++c)
        row_dot += d_o.data[(b * tq + i) * dv + c] * o.data[(b * tq + i) * dv + c];
      for (int64_t j = 0; j < tk; ++j) {
        double p = std::exp(s[j] - lse.data[b * tq + i]);
        if (which == attention_attrs::grad_v) {
          for (int64_t c = 0; c < dv; ++c)
            out.data[(b * tk + j) * dv + c] += p * d_o.data[(b * tq + i) * dv + c];
          continue;
        }
        if (!rows.keeps(b, i, j)) continue; // a masked score is a constant
        double dp = 0;
        for (int64_t c = 0; c < dv; ++c)
          dp += d_o.data[(b * tq + i) * dv + c] * v.data[(b * tk + j) * dv + c];
        double ds = p * (dp - row_dot) * rows.scale;
        for (int64_t c = 0; c < d; ++c) {
          if (which == attention_attrs::grad_q)
            out.data[(b * tq + i) * d + c] += ds * k.data[(b * tk + j) * d + c];
          else
            out.data[(b * tk + j) * d + c] += ds * q.data[(b * tq + i) * d + c];
        }
      }
    }
  return out;
}

/// The packed gradient's shape [..., T, 3, H, D] from q's [..., H, T, D].
Shape packed_gradient_shape(const Shape& q) {
  Shape out = token_major_shape(q);
  out.insert(out.end() - 2, 3);
  return out;
}

} // namespace

// Operands: q, k, v, o (the forward's result, head-major), lse (fused_attention_lse), do (o's
// cotangent, head-major), optionally the mask; attrs as the forward's plus ints = {0 | 1 | 2}:
// the gradient of q, k or v, or {3}: all three packed (attention_attrs::grad_packed). The
// gradients of one forward share their operands and run as one kernel.
const OpDef fused_attention_grad_op{
    .arity = -1,
    .differentiable = false,
    .kernel_kind = KernelKind::attention,
    .infer =
        [](std::span<const TensorType> in, const Attrs& a) {
          if (in.size() != 6 && in.size() != 7)
            type_rules::fail("attention's gradient takes q, k, v, o, lse, do and an optional "
                             "mask, got " +
                             std::to_string(in.size()) + " operands");
          if (a.ints.size() != 1 || a.ints[0] < 0 || a.ints[0] > attention_attrs::grad_packed)
            type_rules::fail("attention's gradient needs ints = {0 (q), 1 (k), 2 (v) or 3 (all "
                             "three, packed)}");
          Shape out = check_attention_operands(in.subspan(0, 3), in.size() == 7 ? &in[6] : nullptr);
          TensorType o{in[0].dtype, out};
          if (in[3] != o || in[5] != o)
            type_rules::fail("o and do must be " + to_string(o) + ", got " + to_string(in[3]) +
                             " and " + to_string(in[5]));
          // Any float type: the saved one is f32, generated tests feed each precision.
          if (!is_float(in[4].dtype) || in[4].shape != rows_shape(in[0].shape))
            type_rules::fail("lse must be a float " + to_string(rows_shape(in[0].shape)) +
                             ", got " + to_string(in[4]));
          if (!writes_packed(a)) return in[static_cast<std::size_t>(a.ints[0])];
          if (in[0].shape.size() < 3 || in[1].shape != in[0].shape || in[2].shape != in[0].shape)
            type_rules::fail("packed attention gradients need q, k and v of one shape [..., H, "
                             "T, D], got " +
                             to_string(in[0].shape) + ", " + to_string(in[1].shape) + ", " +
                             to_string(in[2].shape));
          return TensorType{in[0].dtype, packed_gradient_shape(in[0].shape)};
        },
    .lower =
        [](std::span<const Value> in, const Attrs& a) {
          return writes_packed(a) ? decomposed_packed_gradient(in, a) : decomposed_gradient(in, a);
        },
    .reference =
        [](Args in, const Attrs& a, const TensorType&) {
          if (!writes_packed(a)) return reference_gradient(in, a, a.ints[0]);
          std::vector<F64Tensor> parts;
          for (int64_t which :
               {attention_attrs::grad_q, attention_attrs::grad_k, attention_attrs::grad_v})
            parts.push_back(to_token_major(reference_gradient(in, a, which)));
          // [..., T, H, D] each, interleaved as [..., T, 3, H, D].
          const Shape& part = parts[0].shape;
          int64_t row = part[part.size() - 2] * part.back();
          int64_t rows = numel(part) / std::max<int64_t>(1, row);
          F64Tensor out{packed_gradient_shape(in[0].shape),
                        std::vector<double>(3 * static_cast<std::size_t>(numel(part)))};
          for (int64_t r = 0; r < rows; ++r)
            for (std::size_t w = 0; w < 3; ++w)
              std::copy_n(parts[w].data.begin() + r * row, row,
                          out.data.begin() + (3 * r + static_cast<int64_t>(w)) * row);
          return out;
        },
    .test_cases =
        [] {
          std::vector<OpTestCase> cases;
          auto add = [&](const OpTestCase& f, int64_t which) {
            const Shape& q = f.operands[0].shape;
            Shape o = q, rows = rows_shape(q);
            o.back() = f.operands[2].shape.back();
            OpTestCase c{{f.operands[0], f.operands[1], f.operands[2],
                          TestOperand{DType::f64, o, -1.0, 1.0},
                          // Near a real log-sum-exp, so exp(s - lse) stays moderate.
                          TestOperand{DType::f64, rows, 1.0, 3.0}, TestOperand{DType::f64, o}},
                         f.attrs};
            if (f.operands.size() == 4) c.operands.push_back(f.operands[3]);
            c.attrs.ints = {which};
            cases.push_back(c);
          };
          for (const OpTestCase& f : forward_cases())
            for (int64_t which = 0; which < 3; ++which)
              add(f, which);
          // Self-attention over heads, as a packed qkv projection makes it: even and odd
          // feature dims, causal and masked.
          TestOperand heads{DType::f64, {2, 3, 5, 4}}, odd{DType::f64, {1, 2, 10, 5}};
          add({{heads, heads, heads}, Attrs{}}, attention_attrs::grad_packed);
          add({{odd, odd, odd}, Attrs{.real = 0.5, .flag = true}}, attention_attrs::grad_packed);
          add({{heads, heads, heads, TestOperand{DType::boolean, {5, 5}, 0, 2}}, Attrs{}},
              attention_attrs::grad_packed);
          return cases;
        },
};

} // namespace sinter::op_defs

namespace sinter::attention_attrs {

Value pack_gradients(std::span<const Value> grads) {
  std::vector<Value> parts;
  for (const Value& grad : grads) {
    Shape part = token_major_shape(grad.shape());
    part.insert(part.end() - 2, 1);
    parts.push_back(reshape(permute(grad, heads_rows_swap(grad.shape().size())), part));
  }
  return concat(parts, static_cast<int64_t>(parts[0].shape().size()) - 3);
}

} // namespace sinter::attention_attrs
