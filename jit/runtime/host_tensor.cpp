// jit/runtime/host_tensor.cpp — typed element access and narrow-float conversions
#include "jit/runtime/host_tensor.hpp"

#include "jit/ir/half.hpp"

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <sys/mman.h>

namespace sinter {
namespace {

template <class T> T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T> void store(std::byte* p, T v) { std::memcpy(p, &v, sizeof v); }

} // namespace

float round_to_bf16(float v) { return bf16_value(bf16_bits(v)); }
float round_to_f16(float v) { return f16_value(f16_bits(v)); }

uint64_t HostTensor::new_stamp() {
  // Unique across threads without an atomic per call: each thread takes blocks of stamps.
  static std::atomic<uint64_t> next_block{1};
  constexpr uint64_t block = uint64_t{1} << 20;
  thread_local uint64_t next = 0, end = 0;
  if (next == end) {
    next = next_block.fetch_add(1) * block;
    end = next + block;
  }
  return next++;
}

namespace {
// Buffers from here up are mapped directly: fresh zero pages, whatever the allocator's
// settings (MALLOC_PERTURB_ makes glibc write into calloc'd memory).
constexpr std::size_t mapped_from = std::size_t{1} << 20;
} // namespace

ZeroedBytes::ZeroedBytes(std::size_t size) : size_(size) {
  if (size == 0) return;
  if (size >= mapped_from) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<std::byte*>(p);
    return;
  }
  data_ = static_cast<std::byte*>(std::calloc(size, 1));
  if (!data_) throw std::bad_alloc();
}

ZeroedBytes ZeroedBytes::borrow(std::span<const std::byte> bytes) {
  ZeroedBytes out;
  out.data_ = const_cast<std::byte*>(bytes.data()); // never written: see HostTensor::borrow
  out.size_ = bytes.size();
  out.owned_ = false;
  return out;
}

void ZeroedBytes::discard() {
  if (data_ && owned_ && size_ >= mapped_from) madvise(data_, size_, MADV_DONTNEED);
}

void ZeroedBytes::release() {
  if (!data_ || !std::exchange(owned_, true)) {
    data_ = nullptr;
    return;
  }
  if (size_ >= mapped_from)
    munmap(data_, size_);
  else
    std::free(data_);
  data_ = nullptr;
}

ZeroedBytes::ZeroedBytes(const ZeroedBytes& other) : ZeroedBytes(other.size_) {
  if (size_) std::memcpy(data_, other.data_, size_);
}

ZeroedBytes& ZeroedBytes::operator=(const ZeroedBytes& other) {
  if (this != &other) *this = ZeroedBytes(other);
  return *this;
}

ZeroedBytes& ZeroedBytes::operator=(ZeroedBytes&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owned_ = std::exchange(other.owned_, true);
  }
  return *this;
}

ZeroedBytes::~ZeroedBytes() { release(); }

namespace {

/// The zeroed bytes of a `dtype` tensor of `shape`; a shape with a negative dim, one too large
/// to count, or an allocation the host refuses throws, naming the tensor.
ZeroedBytes bytes_for(DType dtype, const Shape& shape) {
  std::string tensor = std::string(dtype_name(dtype)) + to_string(shape);
  for (int64_t d : shape)
    if (d < 0)
      throw std::invalid_argument("sinter: a tensor of shape " + tensor +
                                  " has a negative dim; every dim must be 0 or more");
  int64_t bytes = static_cast<int64_t>(dtype_bytes(dtype));
  for (int64_t d : shape)
    if (__builtin_mul_overflow(bytes, d, &bytes))
      throw HostAllocationError("sinter: a " + tensor +
                                " tensor has more bytes than a 64-bit size holds; check the "
                                "sizes the model or batch was built with");
  try {
    return ZeroedBytes(static_cast<std::size_t>(bytes));
  } catch (const std::bad_alloc&) {
    char gib[32];
    std::snprintf(gib, sizeof gib, "%.1f", static_cast<double>(bytes) / (1 << 30));
    throw HostAllocationError("sinter: cannot allocate " + std::string(gib) +
                              " GiB of host memory for a " + tensor +
                              " tensor; check the sizes the model or batch was built with");
  }
}

} // namespace

HostTensor::HostTensor(DType dtype, Shape shape)
    : dtype_(dtype), shape_(std::move(shape)), bytes_(bytes_for(dtype_, shape_)), zero_(true) {}

HostTensor::HostTensor(const HostTensor& other)
    : dtype_(other.dtype_), shape_(other.shape_), bytes_((other.settle(), other.bytes_)),
      zero_(other.zero_) {}

HostTensor HostTensor::borrow(const HostTensor& of) {
  HostTensor out;
  out.dtype_ = of.dtype_;
  out.shape_ = of.shape_;
  out.bytes_ = ZeroedBytes::borrow(of.bytes());
  out.stamp_ = of.stamp();
  out.zero_ = of.known_zero();
  return out;
}

HostTensor& HostTensor::operator=(const HostTensor& other) {
  if (this != &other) *this = HostTensor(other);
  return *this;
}

void HostTensor::defer(std::shared_ptr<const DeferredBytes> source) {
  std::size_t size = static_cast<std::size_t>(numel(shape_)) * dtype_bytes(dtype_);
  // Untouched until fetched: a value that stays on a GPU (parameters, optimizer state) holds
  // no host memory meanwhile.
  if (bytes_.size() != size)
    bytes_ = ZeroedBytes(size);
  else
    bytes_.discard();
  source_ = std::move(source);
  pending_ = source_ != nullptr;
  stamp_ = 0;
  zero_ = false;
}

HostTensor HostTensor::from_doubles(DType dtype, Shape shape, std::span<const double> values) {
  HostTensor t(dtype, std::move(shape));
  if (values.size() != static_cast<std::size_t>(t.size()))
    throw std::invalid_argument("sinter: " + std::to_string(values.size()) + " values for shape " +
                                sinter::to_string(t.shape()) + " (needs " +
                                std::to_string(t.size()) + ")");
  if (dtype == DType::f32) { // in bulk: the same values set() stores
    auto* out = reinterpret_cast<float*>(t.bytes().data());
    for (std::size_t i = 0; i < values.size(); ++i)
      out[i] = static_cast<float>(values[i]);
    return t;
  }
  for (std::size_t i = 0; i < values.size(); ++i)
    t.set(static_cast<int64_t>(i), values[i]);
  return t;
}

double HostTensor::at(int64_t i) const {
  const std::byte* p = bytes().data() + i * static_cast<int64_t>(dtype_bytes(dtype_));
  switch (dtype_) {
  case DType::f32: return load<float>(p);
  case DType::f64: return load<double>(p);
  case DType::bf16: return bf16_value(load<uint16_t>(p));
  case DType::f16: return f16_value(load<uint16_t>(p));
  case DType::i32: return load<int32_t>(p);
  case DType::i64: return static_cast<double>(load<int64_t>(p));
  case DType::boolean: return load<uint8_t>(p) ? 1.0 : 0.0;
  }
  return 0;
}

void HostTensor::set(int64_t i, double v) {
  std::byte* p = bytes().data() + i * static_cast<int64_t>(dtype_bytes(dtype_));
  switch (dtype_) {
  case DType::f32: store(p, static_cast<float>(v)); break;
  case DType::f64: store(p, v); break;
  case DType::bf16: store(p, bf16_bits(static_cast<float>(v))); break;
  case DType::f16: store(p, f16_bits(static_cast<float>(v))); break;
  case DType::i32: store(p, static_cast<int32_t>(v)); break;
  case DType::i64: store(p, static_cast<int64_t>(v)); break;
  case DType::boolean: store(p, static_cast<uint8_t>(v != 0.0)); break;
  }
}

void convert_values(const HostTensor& from, HostTensor& to) {
  if (from.size() != to.size())
    throw std::invalid_argument("sinter: convert_values between " + std::to_string(from.size()) +
                                " and " + std::to_string(to.size()) + " elements");
  std::span<const std::byte> in = from.bytes();
  std::span<std::byte> out = to.bytes();
  const auto n = static_cast<std::size_t>(from.size());
  if (from.dtype() == DType::f32 && (to.dtype() == DType::bf16 || to.dtype() == DType::f16)) {
    const bool bf16 = to.dtype() == DType::bf16;
    for (std::size_t i = 0; i < n; ++i) {
      float v = load<float>(in.data() + 4 * i);
      store(out.data() + 2 * i, bf16 ? bf16_bits(v) : f16_bits(v));
    }
    return;
  }
  for (std::size_t i = 0; i < n; ++i)
    to.set(static_cast<int64_t>(i), from.at(static_cast<int64_t>(i)));
}

std::vector<double> HostTensor::to_doubles() const {
  std::vector<double> out(static_cast<std::size_t>(size()));
  for (int64_t i = 0; i < size(); ++i)
    out[static_cast<std::size_t>(i)] = at(i);
  return out;
}

std::string HostTensor::to_string(std::size_t max_values) const {
  std::string out = std::string(dtype_name(dtype_)) + sinter::to_string(shape_) + " {";
  for (int64_t i = 0; i < size(); ++i) {
    if (static_cast<std::size_t>(i) == max_values) {
      out += ", ...";
      break;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", at(i));
    out += (i ? ", " : "") + std::string(buf);
  }
  return out + "}";
}

} // namespace sinter
