// ops/reference.hpp — naive float64 building blocks for the ops' independent reference functions
#pragma once
#include "ops/registry.hpp"

#include <algorithm>
#include <functional>

namespace sinter::reference {

/// Multi-index of flat position `flat` in `shape` (row-major).
inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (std::size_t i = shape.size(); i-- > 0;) {
    idx[i] = flat % shape[i];
    flat /= shape[i];
  }
  return idx;
}

inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (std::size_t i = 0; i < shape.size(); ++i)
    flat = flat * shape[i] + idx[i];
  return flat;
}

/// Element of `t` at output multi-index `out_idx` under numpy broadcasting.
inline double broadcast_at(const F64Tensor& t, const std::vector<int64_t>& out_idx) {
  std::size_t offset = out_idx.size() - t.shape.size();
  int64_t flat = 0;
  for (std::size_t i = 0; i < t.shape.size(); ++i)
    flat = flat * t.shape[i] + (t.shape[i] == 1 ? 0 : out_idx[offset + i]);
  return t.data[flat];
}

/// Elementwise map with broadcasting: out[i] = f(args at i).
inline F64Tensor map(std::span<const F64Tensor> in, const Shape& out_shape,
                     const std::function<double(const std::vector<double>&)>& f) {
  F64Tensor out{out_shape, std::vector<double>(numel(out_shape))};
  std::vector<double> args(in.size());
  for (int64_t i = 0; i < numel(out_shape); ++i) {
    auto idx = unravel(i, out_shape);
    for (std::size_t k = 0; k < in.size(); ++k)
      args[k] = broadcast_at(in[k], idx);
    out.data[i] = f(args);
  }
  return out;
}

/// Folds the elements of `x` along `axes` (normalised) with `combine`, starting at `init`.
inline F64Tensor reduce(const F64Tensor& x, const std::vector<int64_t>& axes, bool keepdims,
                        double init, const std::function<double(double, double)>& combine) {
  Shape kept = x.shape;
  for (int64_t a : axes)
    kept[a] = 1;
  F64Tensor out{kept, std::vector<double>(numel(kept), init)};
  for (int64_t i = 0; i < numel(x.shape); ++i) {
    auto idx = unravel(i, x.shape);
    for (int64_t a : axes)
      idx[a] = 0;
    double& slot = out.data[ravel(idx, kept)];
    slot = combine(slot, x.data[i]);
  }
  if (!keepdims) {
    Shape dropped;
    for (std::size_t d = 0; d < kept.size(); ++d)
      if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end())
        dropped.push_back(kept[d]);
    out.shape = dropped;
  }
  return out;
}

} // namespace sinter::reference
