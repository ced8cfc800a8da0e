// jit/data/dataset.hpp — Dataset: indexed, typed examples and labels that loaders batch
#pragma once
#include "jit/ir/graph.hpp"

#include <cstddef>

namespace sinter::data {

/// A fixed-size collection of (example, label) pairs with static types. Loaders call `read`
/// from several threads at once, so implementations hold their data immutably after
/// construction.
class Dataset {
public:
  virtual ~Dataset() = default;
  /// Number of examples.
  virtual std::size_t size() const = 0;
  /// Type of one example (without the batch dim).
  virtual TensorType example_type() const = 0;
  /// Type of one label (without the batch dim); `[]` for a class index.
  virtual TensorType label_type() const = 0;
  /// Writes example `index` into `example` and its label into `label`, dense row-major in their
  /// dtypes (exactly `byte_size(example_type())` and `byte_size(label_type())` bytes).
  /// Thread-safe; throws std::out_of_range past `size()`.
  virtual void read(std::size_t index, std::byte* example, std::byte* label) const = 0;
};

} // namespace sinter::data
