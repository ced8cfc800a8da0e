// tests/compile_fail/static_dim_mismatch.cpp — adding [3,4] and [5] must be a compile error
// expect-error: sinter: elementwise operands have mismatched static dims
#include "dsl/sinter.hpp"

using namespace sinter;

Tensor<f32, 3, 4> add(Tensor<f32, 3, 4> a, Tensor<f32, 5> b) { return a + b; }
