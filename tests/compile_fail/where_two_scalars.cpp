// tests/compile_fail/where_two_scalars.cpp — where with two scalar branches has no dtype: an error
// expect-error: sinter: where needs at least one tensor branch
#include "dsl/sinter.hpp"

using namespace sinter;

auto pick(Tensor<f32, 3> x) { return where(x > 0.0, 1.0, 0.0); }
