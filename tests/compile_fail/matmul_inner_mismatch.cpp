// tests/compile_fail/matmul_inner_mismatch.cpp — [dyn,784] x [100,10] must be a compile error
// expect-error: sinter: matmul inner dimensions differ
#include "dsl/sinter.hpp"

using namespace sinter;

Tensor<f32, dyn, 10> logits(Tensor<f32, dyn, 784> images, Tensor<f32, 100, 10> w) {
  return matmul(images, w);
}
