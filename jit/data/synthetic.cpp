// jit/data/synthetic.cpp — counter-based generation of Gaussian blobs
#include "jit/data/synthetic.hpp"

#include <cmath>
#include <cstring>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

namespace sinter::data {
namespace {

/// splitmix64's finaliser: a bijective 64-bit mix.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Random bits addressed by (seed, stream, a, b): no generator state, so reads are thread-safe
/// and order-independent.
uint64_t bits_at(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
  return mix(mix(mix(mix(seed) ^ stream) ^ a) ^ b);
}

/// A uniform in (0, 1) from 53 random bits.
double unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

/// A standard normal (Box–Muller) addressed like bits_at.
double normal_at(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
  double u1 = unit(bits_at(seed, stream, a, 2 * b));
  double u2 = unit(bits_at(seed, stream, a, 2 * b + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

enum Stream : uint64_t { centre_stream = 1, label_stream = 2, noise_stream = 3 };

class GaussianBlobs final : public Dataset {
public:
  GaussianBlobs(std::size_t examples, int64_t features, int64_t classes, uint64_t seed)
      : examples_(examples), features_(features), classes_(classes), seed_(seed),
        centres_(static_cast<std::size_t>(features * classes)) {
    for (int64_t c = 0; c < classes; ++c)
      for (int64_t f = 0; f < features; ++f)
        centres_[static_cast<std::size_t>(c * features + f)] =
            3.0 *
            normal_at(seed, centre_stream, static_cast<uint64_t>(c), static_cast<uint64_t>(f));
  }

  std::size_t size() const override { return examples_; }
  TensorType example_type() const override { return {DType::f32, {features_}}; }
  TensorType label_type() const override { return {DType::i32, {}}; }

  void read(std::size_t index, std::byte* example, std::byte* label) const override {
    if (index >= examples_)
      throw std::out_of_range("sinter: gaussian_blobs index " + std::to_string(index) +
                              " out of range (size " + std::to_string(examples_) + ")");
    auto y = static_cast<int32_t>(bits_at(seed_, label_stream, index, 0) %
                                  static_cast<uint64_t>(classes_));
    std::memcpy(label, &y, sizeof y);
    for (int64_t f = 0; f < features_; ++f) {
      auto x = static_cast<float>(centres_[static_cast<std::size_t>(y * features_ + f)] +
                                  normal_at(seed_, noise_stream, index, static_cast<uint64_t>(f)));
      std::memcpy(example + f * 4, &x, sizeof x);
    }
  }

private:
  std::size_t examples_;
  int64_t features_, classes_;
  uint64_t seed_;
  std::vector<double> centres_; ///< [classes, features]
};

} // namespace

std::unique_ptr<Dataset> gaussian_blobs(std::size_t examples, int64_t features, int64_t classes,
                                        uint64_t seed) {
  if (features < 1 || classes < 1)
    throw std::invalid_argument("sinter: gaussian_blobs needs features >= 1 and classes >= 1, got "
                                "features " +
                                std::to_string(features) + ", classes " + std::to_string(classes));
  return std::make_unique<GaussianBlobs>(examples, features, classes, seed);
}

} // namespace sinter::data
