// jit/data/fashion_mnist.hpp — the Fashion-MNIST image classification data set
#pragma once
#include "jit/data/dataset.hpp"

#include <filesystem>
#include <memory>

namespace sinter::data {

enum class Split { train, test };

/// `$SINTER_FASHION_MNIST_DIR` if set, else `/usr/share/datasets/fashion-mnist` (Debian package
/// `dataset-fashion-mnist`).
std::filesystem::path default_fashion_mnist_dir();

/// Fashion-MNIST loaded whole into memory (60000 train / 10000 test): examples f32 [28,28] in
/// [0,1] (pixel / 255), labels i32 [] in 0..9. Reads `{train,t10k}-{images-idx3,labels-idx1}-ubyte`
/// with or without `.gz`. Throws std::runtime_error naming the file and the fix when a file is
/// missing or malformed, or when images and labels disagree.
std::unique_ptr<Dataset> fashion_mnist(Split split,
                                       std::filesystem::path dir = default_fashion_mnist_dir());

} // namespace sinter::data
