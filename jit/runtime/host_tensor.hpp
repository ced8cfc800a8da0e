// jit/runtime/host_tensor.hpp — HostTensor: a typed, dense, row-major tensor in host memory
#pragma once
#include "jit/ir/dtype.hpp"
#include "jit/ir/shape.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace sinter {

/// A tensor value that lives outside host memory (a GPU buffer) and is copied in on demand.
class DeferredBytes {
public:
  virtual ~DeferredBytes() = default;
  /// Copies the value into `into` (the tensor's size). Throws std::logic_error if the value
  /// no longer exists.
  virtual void fetch(std::span<std::byte> into) const = 0;
};

/// A host allocation that failed, naming the tensor and its size. A std::bad_alloc, so code
/// that explains running out of memory still catches it.
class HostAllocationError : public std::bad_alloc {
public:
  explicit HostAllocationError(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

private:
  std::string message_;
};

/// Zero-filled bytes: calloc for small buffers, an anonymous mapping from 1 MiB up. A large
/// buffer is fresh pages that the OS maps on first write, so a tensor nobody wrote or read (a
/// deferred GPU result, a just-made output) adds no resident memory; std::vector would zero
/// every page by hand.
class ZeroedBytes {
public:
  ZeroedBytes() = default;
  explicit ZeroedBytes(std::size_t size);
  ZeroedBytes(const ZeroedBytes& other);
  ZeroedBytes& operator=(const ZeroedBytes& other);
  ZeroedBytes(ZeroedBytes&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
        owned_(std::exchange(other.owned_, true)) {}
  /// Gives a large buffer's pages back to the OS; they read as zeros until written again.
  void discard();
  /// Bytes owned elsewhere, never freed here (HostTensor::borrow); a copy owns its bytes.
  static ZeroedBytes borrow(std::span<const std::byte> bytes);
  ZeroedBytes& operator=(ZeroedBytes&& other) noexcept;
  ~ZeroedBytes();
  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  operator std::span<std::byte>() const { return {data_, size_}; }
  std::byte* begin() const { return data_; }
  std::byte* end() const { return data_ + size_; }

private:
  void release();
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool owned_ = true;
};

/// Owns its bytes. Values convert to and from double at the edges (tests, printing, the
/// float64 interpreter); bf16/f16 round to nearest even.
///
/// A tensor can also hold a deferred value (defer()): a training step on a GPU hands back its
/// updated parameters this way, so they stay on the device between steps. Any access to the
/// bytes fetches the value first, so a reader always sees it; copies always hold real bytes.
/// Not thread-safe while a value is deferred (the first reader fetches it).
class HostTensor {
public:
  HostTensor() = default;
  HostTensor(DType dtype, Shape shape);
  HostTensor(const HostTensor& other);
  HostTensor& operator=(const HostTensor& other);
  HostTensor(HostTensor&&) noexcept = default;
  HostTensor& operator=(HostTensor&&) noexcept = default;
  ~HostTensor() = default;

  /// `of`'s value without copying it (fetched first if deferred), with `of`'s stamp: how a
  /// call passes the caller's tensors on (a training step's batch) without copying the bytes.
  /// `of` must outlive the borrowed tensor and not change meanwhile, and the borrowed tensor
  /// must not be written; a copy of it owns its bytes.
  static HostTensor borrow(const HostTensor& of);
  /// A tensor of `dtype` holding `values` (converted, rounded for narrow types).
  static HostTensor from_doubles(DType dtype, Shape shape, std::span<const double> values);
  template <class T>
  static HostTensor from(DType dtype, Shape shape, const std::vector<T>& values) {
    std::vector<double> d(values.begin(), values.end());
    return from_doubles(dtype, std::move(shape), d);
  }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return numel(shape_); }
  /// Writable bytes: fetches a deferred value, and marks the tensor as written.
  std::span<std::byte> bytes() {
    settle();
    source_.reset();
    stamp_ = 0; // a new stamp is drawn when one is next asked for
    zero_ = false;
    return bytes_;
  }
  std::span<const std::byte> bytes() const {
    settle();
    return bytes_;
  }

  /// The tensor's value is now `source`'s (same dtype and shape), fetched on first access.
  void defer(std::shared_ptr<const DeferredBytes> source);
  /// The source given to defer() while the tensor has not been written since (whether or not
  /// the value was fetched); null otherwise. A backend that made the source can tell that it
  /// still holds this tensor's value and skip copying it back.
  const DeferredBytes* unwritten_source() const { return source_.get(); }
  /// Whether the value is still deferred (not fetched yet).
  bool deferred() const { return pending_; }
  /// Whether the value is all zeros because nothing has written it since it was made (as a
  /// new tensor of a dtype and shape, or a copy or borrow of one): a GPU backend clears its
  /// device buffer instead of copying zeros up (an optimizer's fresh moments).
  bool known_zero() const { return zero_ && !pending_; }
  /// Bytes held (dtype size × elements, 0 for a default tensor), without fetching anything.
  std::size_t byte_size() const { return bytes_.size(); }
  /// Identifies the tensor's current value without reading it: a new stamp whenever the value
  /// may change (writable bytes(), set, defer, a copy), carried along by moves and swaps. A
  /// training step compares stamps to notice a parameter replaced or edited between steps.
  uint64_t stamp() const {
    if (stamp_ == 0) stamp_ = new_stamp();
    return stamp_;
  }

  double at(int64_t flat_index) const;
  void set(int64_t flat_index, double value);
  std::vector<double> to_doubles() const;
  /// `f32[2,3] {1, 2, 3, 4, 5, 6}` (elided past `max_values`).
  std::string to_string(std::size_t max_values = 16) const;

private:
  void settle() const {
    if (pending_) {
      source_->fetch(bytes_);
      pending_ = false;
    }
  }

  static uint64_t new_stamp();

  DType dtype_ = DType::f32;
  Shape shape_;
  mutable uint64_t stamp_ =
      0; ///< 0: changed since the last stamp() (drawn lazily: writes stay cheap)
  mutable ZeroedBytes bytes_;
  std::shared_ptr<const DeferredBytes> source_;
  mutable bool pending_ = false;
  bool zero_ = false; ///< made zero and not written since (known_zero)
};

/// Writes `from`'s values into `to` (same element count), converted to `to`'s dtype as set()
/// converts them; f32 to bf16 or f16 (AMP's working copies) without going through double.
void convert_values(const HostTensor& from, HostTensor& to);

/// Round-trip of a double through a narrow float format (nearest even).
float round_to_bf16(float v);
float round_to_f16(float v);

} // namespace sinter
