// jit/data/synthetic.hpp — generated data sets for tests and quick runs
#pragma once
#include "jit/data/dataset.hpp"

#include <cstdint>
#include <memory>

namespace sinter::data {

/// `classes` isotropic Gaussian clusters in `features` dims: class centres ~ N(0, 3^2) per
/// coordinate, points = centre + N(0, 1), labels uniform over 0..classes-1. Examples f32
/// [features], labels i32 []. Every example is a pure function of (seed, index): nothing is
/// stored, and the same arguments give the same data on every machine.
std::unique_ptr<Dataset> gaussian_blobs(std::size_t examples, int64_t features, int64_t classes,
                                        uint64_t seed);

} // namespace sinter::data
