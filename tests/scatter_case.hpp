// tests/scatter_case.hpp — a table gradient's scatter with many repeated rows, and the sums it
// must give added in position order (what a reproducible GPU scatter computes, bit for bit)
#pragma once
#include "dsl/sinter.hpp"
#include "jit/ir/half.hpp"

#include <cstring>
#include <random>
#include <vector>

namespace sinter::testing {

inline bool same_bits(const HostTensor& a, const HostTensor& b) {
  return a.bytes().size() == b.bytes().size() &&
         std::memcmp(a.bytes().data(), b.bytes().data(), a.bytes().size()) == 0;
}

/// A table gradient's scatter: `positions` rows of `width` updates into `rows` rows, the row
/// indices drawn with many repeats and a few out of range (dropped).
struct ScatterCase {
  int64_t positions, width, rows;
  DType dtype;
  Graph graph;
  std::vector<int32_t> ids;
  std::vector<float> updates; ///< as stored (rounded to `dtype`)
  std::vector<HostTensor> inputs;

  ScatterCase(int64_t positions_, int64_t width_, int64_t rows_, DType dtype_)
      : positions(positions_), width(width_), rows(rows_), dtype(dtype_) {
    Value i = input(graph, "ids", {DType::i32, {positions}});
    Value u = input(graph, "u", {dtype, {positions, width}});
    graph.add_output("table", emit(OpId::scatter_add, {i, u}, Attrs{.ints = {rows}}).id);
    std::mt19937 random(11);
    std::uniform_int_distribution<int32_t> row(-2, static_cast<int32_t>(rows) + 1);
    std::normal_distribution<float> value(0.0f, 1.0f);
    std::vector<double> id_values, update_values;
    for (int64_t p = 0; p < positions; ++p) {
      ids.push_back(row(random));
      id_values.push_back(ids.back());
    }
    for (int64_t e = 0; e < positions * width; ++e) {
      float x = value(random);
      if (dtype == DType::bf16) x = bf16_value(bf16_bits(x));
      updates.push_back(x);
      update_values.push_back(x);
    }
    inputs.push_back(HostTensor::from_doubles(DType::i32, {positions}, id_values));
    inputs.push_back(HostTensor::from_doubles(dtype, {positions, width}, update_values));
  }

  /// Each element the sum of its updates in position order, rounded to `dtype` after each add
  /// (what the CPU backend and a single GPU thread compute), as stored bytes.
  HostTensor in_order() const {
    std::vector<float> sum(static_cast<std::size_t>(rows * width), 0.0f);
    for (int64_t p = 0; p < positions; ++p) {
      int32_t r = ids[static_cast<std::size_t>(p)];
      if (r < 0 || r >= rows) continue;
      for (int64_t k = 0; k < width; ++k) {
        float& slot = sum[static_cast<std::size_t>(r * width + k)];
        slot += updates[static_cast<std::size_t>(p * width + k)];
        if (dtype == DType::bf16) slot = bf16_value(bf16_bits(slot));
      }
    }
    return HostTensor::from_doubles(dtype, {rows, width},
                                    std::vector<double>(sum.begin(), sum.end()));
  }
};

} // namespace sinter::testing
