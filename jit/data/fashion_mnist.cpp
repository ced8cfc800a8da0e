// jit/data/fashion_mnist.cpp — loads Fashion-MNIST's IDX files and serves normalised images
#include "jit/data/fashion_mnist.hpp"
#include "jit/settings.hpp"

#include "jit/data/idx.hpp"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace sinter::data {
namespace {

constexpr int64_t image_side = 28;
constexpr int64_t classes = 10;

/// `dir/name.gz`, else `dir/name`; a missing pair is an installation problem, so the error says
/// how to install or where to point instead.
std::filesystem::path locate(const std::filesystem::path& dir, const std::string& name) {
  std::error_code ec;
  for (const auto& candidate : {dir / (name + ".gz"), dir / name})
    if (std::filesystem::exists(candidate, ec)) return candidate;
  throw std::runtime_error(
      "sinter: Fashion-MNIST file " + (dir / (name + ".gz")).string() + " (or " +
      (dir / name).string() +
      ") does not exist; expected the IDX files of the Debian package dataset-fashion-mnist "
      "(`apt-get install dataset-fashion-mnist`), or set SINTER_FASHION_MNIST_DIR to a directory "
      "holding train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
      "t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte[.gz]");
}

class FashionMnist final : public Dataset {
public:
  FashionMnist(std::vector<std::byte> pixels, std::vector<std::byte> labels)
      : pixels_(std::move(pixels)), labels_(std::move(labels)) {}

  std::size_t size() const override { return labels_.size(); }
  TensorType example_type() const override { return {DType::f32, {image_side, image_side}}; }
  TensorType label_type() const override { return {DType::i32, {}}; }

  void read(std::size_t index, std::byte* example, std::byte* label) const override {
    if (index >= size())
      throw std::out_of_range("sinter: Fashion-MNIST index " + std::to_string(index) +
                              " out of range (size " + std::to_string(size()) + ")");
    constexpr std::size_t pixels_per_image = image_side * image_side;
    const std::byte* src = pixels_.data() + index * pixels_per_image;
    float values[pixels_per_image];
    for (std::size_t i = 0; i < pixels_per_image; ++i)
      values[i] = static_cast<float>(std::to_integer<uint8_t>(src[i])) * (1.0f / 255.0f);
    std::memcpy(example, values, sizeof values);
    int32_t y = std::to_integer<uint8_t>(labels_[index]);
    std::memcpy(label, &y, sizeof y);
  }

private:
  std::vector<std::byte> pixels_; ///< u8, 784 per image
  std::vector<std::byte> labels_; ///< u8 class ids
};

std::runtime_error format_error(const std::filesystem::path& file, const std::string& what) {
  return std::runtime_error("sinter: Fashion-MNIST file " + file.string() + ": " + what);
}

} // namespace

std::filesystem::path default_fashion_mnist_dir() {
  const char* env = setting("SINTER_FASHION_MNIST_DIR");
  if (env && *env) return env;
  return "/usr/share/datasets/fashion-mnist";
}

std::unique_ptr<Dataset> fashion_mnist(Split split, std::filesystem::path dir) {
  std::string prefix = split == Split::train ? "train" : "t10k";
  std::filesystem::path image_file = locate(dir, prefix + "-images-idx3-ubyte");
  std::filesystem::path label_file = locate(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx(image_file);
  IdxArray labels = read_idx(label_file);

  if (images.type != IdxType::u8 || images.dims.size() != 3 || images.dims[1] != image_side ||
      images.dims[2] != image_side)
    throw format_error(image_file, "holds " + std::string(idx_type_name(images.type)) +
                                       to_string(images.dims) +
                                       "; expected u8[N,28,28] images (IDX magic 00 00 08 03)");
  if (labels.type != IdxType::u8 || labels.dims.size() != 1)
    throw format_error(label_file, "holds " + std::string(idx_type_name(labels.type)) +
                                       to_string(labels.dims) +
                                       "; expected u8[N] labels (IDX magic 00 00 08 01)");
  if (images.dims[0] != labels.dims[0])
    throw format_error(label_file, "has " + std::to_string(labels.dims[0]) + " labels but " +
                                       image_file.string() + " has " +
                                       std::to_string(images.dims[0]) +
                                       " images; expected one label per image");
  for (std::size_t i = 0; i < labels.data.size(); ++i)
    if (std::to_integer<int>(labels.data[i]) >= classes)
      throw format_error(label_file, "label " + std::to_string(i) + " is " +
                                         std::to_string(std::to_integer<int>(labels.data[i])) +
                                         "; expected class ids 0..9");
  return std::make_unique<FashionMnist>(std::move(images.data), std::move(labels.data));
}

} // namespace sinter::data
