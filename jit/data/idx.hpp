// jit/data/idx.hpp — reader for IDX files (the MNIST family's format), plain or gzip-compressed
#pragma once
#include "jit/ir/shape.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

namespace sinter::data {

/// Element type codes of the IDX format (the third magic byte).
enum class IdxType : uint8_t {
  u8 = 0x08,
  i8 = 0x09,
  i16 = 0x0B,
  i32 = 0x0C,
  f32 = 0x0D,
  f64 = 0x0E
};

std::string_view idx_type_name(IdxType t);
std::size_t idx_type_bytes(IdxType t);

/// One IDX array: its element type, dims and elements in host byte order.
struct IdxArray {
  IdxType type = IdxType::u8;
  Shape dims;
  std::vector<std::byte> data;
};

/// What an IDX file must look like; quoted by every error about one.
inline constexpr std::string_view idx_format_description =
    "an IDX file: bytes 00 00, a type byte (08 u8, 09 i8, 0B i16, 0C i32, 0D f32, 0E f64), a "
    "rank byte, rank big-endian u32 dims, then exactly prod(dims) big-endian elements; "
    "gzip-compressed or plain";

/// Reads a whole IDX file; gzip compression is detected from the content, not the name.
/// Throws std::runtime_error naming the file and what is wrong (cannot open, bad magic,
/// unknown type, truncated, trailing bytes, corrupt gzip stream).
IdxArray read_idx(const std::filesystem::path& file);

/// Writes an IDX file (gzip-compressed when `gzip`); the inverse of read_idx, used by tests and
/// by tools that produce small data sets.
void write_idx(const std::filesystem::path& file, const IdxArray& array, bool gzip);

} // namespace sinter::data
