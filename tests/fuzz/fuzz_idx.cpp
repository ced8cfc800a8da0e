// tests/fuzz/fuzz_idx.cpp — libFuzzer target: IDX files (plain or gzip) through read_idx, and an
// image file with a label file through the Fashion-MNIST loader that pairs them
#include "fuzz_support.hpp"
#include "jit/data/fashion_mnist.hpp"
#include "jit/data/idx.hpp"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace sinter;
  std::vector<std::string_view> files = fuzz::parts(data, size, 2);
  const std::filesystem::path folder = fuzz::scratch() / "fashion";
  std::filesystem::create_directories(folder);
  const std::filesystem::path images = fuzz::as_file("fashion/t10k-images-idx3-ubyte", files[0]);
  try {
    data::IdxArray array = data::read_idx(images);
    std::size_t elements = 1;
    for (int64_t d : array.dims)
      elements *= static_cast<std::size_t>(d);
    if (array.data.size() != elements * data::idx_type_bytes(array.type)) std::abort();
  } catch (const std::runtime_error& e) {
    fuzz::require_named(e.what(), {images.string()});
  }
  if (files.size() < 2) return 0;
  const std::filesystem::path labels = fuzz::as_file("fashion/t10k-labels-idx1-ubyte", files[1]);
  try {
    std::unique_ptr<data::Dataset> set = data::fashion_mnist(data::Split::test, folder);
    // Every example must be readable into buffers of the types the set declares.
    std::vector<std::byte> example(static_cast<std::size_t>(numel(set->example_type().shape)) *
                                   dtype_bytes(set->example_type().dtype));
    std::vector<std::byte> label(static_cast<std::size_t>(numel(set->label_type().shape)) *
                                 dtype_bytes(set->label_type().dtype));
    for (std::size_t i = 0; i < set->size(); ++i)
      set->read(i, example.data(), label.data());
  } catch (const std::runtime_error& e) {
    fuzz::require_named(e.what(), {images.string(), labels.string(), folder.string()});
  }
  return 0;
}
