// ops/test_cases.hpp — shape sets shared by the op files' generated test cases
#pragma once
#include "ops/registry.hpp"

namespace sinter::test_cases {

/// Unary cases: a vector, a rank-3 tensor and a scalar, values in [lo, hi).
inline std::vector<OpTestCase> unary(double lo = -2, double hi = 2, double min_magnitude = 0) {
  std::vector<OpTestCase> cases;
  for (Shape s : {Shape{5}, Shape{2, 3, 4}, Shape{}})
    cases.push_back({{TestOperand{DType::f64, s, lo, hi, min_magnitude}}, {}});
  return cases;
}

/// Binary cases including numpy broadcasting: equal shapes, trailing vector, outer product,
/// scalar against matrix.
inline std::vector<OpTestCase> binary(TestOperand a = {}, TestOperand b = {}) {
  std::vector<OpTestCase> cases;
  for (auto [sa, sb] : {std::pair<Shape, Shape>{{3, 4}, {3, 4}},
                        {{2, 3, 4}, {4}},
                        {{3, 1}, {1, 4}},
                        {{}, {2, 3}}}) {
    TestOperand x = a, y = b;
    x.shape = sa;
    y.shape = sb;
    cases.push_back({{x, y}, {}});
  }
  return cases;
}

} // namespace sinter::test_cases
