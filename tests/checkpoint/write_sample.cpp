// tests/checkpoint/write_sample.cpp — writes the sample checkpoint check_with_python.py reads
//
// Usage: write_sample [--numpy-only] FILE
// The table and value formulas are mirrored in check_with_python.py; change both together.
#include "jit/io/checkpoint.hpp"

#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace sinter;

namespace {

struct SampleTensor {
  const char* name;
  DType dtype;
  Shape shape;
};

/// Element `i` of every sample tensor of `dtype`: exact in each dtype, so both sides agree.
double sample_value(DType dtype, int64_t i) {
  switch (dtype) {
  case DType::i32: return static_cast<double>(i * 7 - 10);
  case DType::i64: return static_cast<double>((i + 1) * (int64_t{1} << 40) + 3);
  case DType::boolean: return i % 3 == 0 ? 1 : 0;
  default: return static_cast<double>(i - 2) * 0.5;
  }
}

} // namespace

int main(int argc, char** argv) {
  bool numpy_only = argc == 3 && std::string_view(argv[1]) == "--numpy-only";
  if (argc != 2 && !numpy_only) {
    std::fprintf(stderr, "usage: write_sample [--numpy-only] FILE\n");
    return 2;
  }
  const std::vector<SampleTensor> table = {
      {"f32.matrix", DType::f32, {2, 3}},   {"f32.scalar", DType::f32, {}},
      {"f32.empty", DType::f32, {0, 3}},    {"f64.vector", DType::f64, {4}},
      {"bf16.matrix", DType::bf16, {3, 2}}, {"f16.vector", DType::f16, {5}},
      {"i32.matrix", DType::i32, {2, 2}},   {"i64.scalar", DType::i64, {}},
      {"i64.vector", DType::i64, {3}},      {"bool.vector", DType::boolean, {5}},
  };
  std::vector<std::pair<std::string, HostTensor>> owned;
  for (const SampleTensor& s : table) {
    if (numpy_only && s.dtype == DType::bf16) continue; // numpy has no bfloat16
    std::vector<double> values(static_cast<std::size_t>(numel(s.shape)));
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = sample_value(s.dtype, static_cast<int64_t>(i));
    owned.emplace_back(s.name, HostTensor::from_doubles(s.dtype, s.shape, values));
  }
  std::vector<std::pair<std::string, const HostTensor*>> named;
  for (const auto& [name, tensor] : owned)
    named.emplace_back(name, &tensor);
  // One metadata entry only: the reference writer keeps metadata in a hash map, so with several
  // keys its byte order would vary and the byte-for-byte comparison could not be made.
  std::string note = std::string(numpy_only ? "numpy" : "all") +
                     " dtypes; \"quoted\", back\\slash, tab\t, caf\xc3\xa9 \xe2\x9c\x93";
  try {
    save_safetensors(argv[argc - 1], named, {{"sinter.sample", note}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
