// jit/data/idx.cpp — IDX parsing and writing through zlib's gz* API (reads plain files too)
#include "jit/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

namespace sinter::data {
namespace {

std::runtime_error idx_error(const std::filesystem::path& file, const std::string& what) {
  return std::runtime_error("sinter: IDX file " + file.string() + ": " + what + "; expected " +
                            std::string(idx_format_description));
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

/// Reads up to `n` bytes; returns how many arrived. A short count means end of data; a corrupt
/// or cut-off gzip stream throws.
std::size_t read_some(gzFile f, const std::filesystem::path& file, std::byte* out, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    auto chunk = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 24));
    int r = gzread(f, out + got, chunk);
    if (r < 0 || (r == 0 && !gzeof(f))) {
      int code = Z_OK;
      const char* message = gzerror(f, &code);
      throw idx_error(file, std::string("corrupt or truncated gzip stream (zlib: ") +
                                (message ? message : "unknown error") + ")");
    }
    got += static_cast<std::size_t>(r);
    if (static_cast<unsigned>(r) < chunk) break;
  }
  // zlib reports a gzip stream cut short only through gzerror once the input runs dry.
  int code = Z_OK;
  gzerror(f, &code);
  if (code != Z_OK && code != Z_STREAM_END)
    throw idx_error(file, std::string("corrupt or truncated gzip stream (zlib: ") +
                              gzerror(f, &code) + ")");
  return got;
}

bool known_type(uint8_t code) {
  switch (code) {
  case 0x08:
  case 0x09:
  case 0x0B:
  case 0x0C:
  case 0x0D:
  case 0x0E: return true;
  default: return false;
  }
}

std::string hex_byte(uint8_t b) {
  const char* digits = "0123456789ABCDEF";
  return {digits[b >> 4], digits[b & 15]};
}

/// IDX stores elements big-endian; flips them to host order (and back, for writing).
void swap_to_host(std::vector<std::byte>& data, std::size_t element_bytes) {
  if (element_bytes == 1 || std::endian::native == std::endian::big) return;
  for (std::size_t i = 0; i + element_bytes <= data.size(); i += element_bytes)
    std::reverse(data.begin() + static_cast<std::ptrdiff_t>(i),
                 data.begin() + static_cast<std::ptrdiff_t>(i + element_bytes));
}

} // namespace

std::string_view idx_type_name(IdxType t) {
  switch (t) {
  case IdxType::u8: return "u8";
  case IdxType::i8: return "i8";
  case IdxType::i16: return "i16";
  case IdxType::i32: return "i32";
  case IdxType::f32: return "f32";
  case IdxType::f64: return "f64";
  }
  return "?";
}

std::size_t idx_type_bytes(IdxType t) {
  switch (t) {
  case IdxType::u8:
  case IdxType::i8: return 1;
  case IdxType::i16: return 2;
  case IdxType::i32:
  case IdxType::f32: return 4;
  case IdxType::f64: return 8;
  }
  return 0;
}

IdxArray read_idx(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw idx_error(file,
                    std::filesystem::exists(file, ec) ? "is not a regular file" : "does not exist");
  GzHandle f(gzopen(file.c_str(), "rb"));
  if (!f) throw idx_error(file, std::string("cannot open: ") + std::strerror(errno));
  gzbuffer(f.get(), 1u << 18);

  uint8_t magic[4];
  std::size_t got = read_some(f.get(), file, reinterpret_cast<std::byte*>(magic), 4);
  if (got < 4)
    throw idx_error(file, "truncated: " + std::to_string(got) +
                              " bytes, shorter than the 4-byte "
                              "magic number");
  if (magic[0] != 0 || magic[1] != 0 || !known_type(magic[2]) || magic[3] == 0)
    throw idx_error(file, "bad magic number " + hex_byte(magic[0]) + " " + hex_byte(magic[1]) +
                              " " + hex_byte(magic[2]) + " " + hex_byte(magic[3]));

  IdxArray out;
  out.type = static_cast<IdxType>(magic[2]);
  int rank = magic[3];
  std::vector<uint8_t> dim_bytes(static_cast<std::size_t>(rank) * 4);
  got = read_some(f.get(), file, reinterpret_cast<std::byte*>(dim_bytes.data()), dim_bytes.size());
  if (got < dim_bytes.size())
    throw idx_error(file, "truncated: the magic number promises " + std::to_string(rank) +
                              " dims but the header ends after " + std::to_string(got / 4));
  // NOTE: 2^62 bytes bounds the product so the size arithmetic below cannot overflow.
  std::size_t expected = idx_type_bytes(out.type);
  for (int d = 0; d < rank; ++d) {
    const uint8_t* b = &dim_bytes[static_cast<std::size_t>(d) * 4];
    uint32_t dim = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    out.dims.push_back(dim);
    if (dim != 0 && expected > (std::size_t{1} << 62) / dim)
      throw idx_error(file, "dims " + to_string(out.dims) + " are implausibly large");
    expected *= dim;
  }

  // Grow as data arrives rather than trusting the header with one huge allocation.
  std::size_t filled = 0;
  while (filled < expected) {
    std::size_t step = std::min(expected - filled, std::max<std::size_t>(filled, 1u << 20));
    out.data.resize(filled + step);
    std::size_t n = read_some(f.get(), file, out.data.data() + filled, step);
    filled += n;
    if (n < step) break;
  }
  if (filled < expected)
    throw idx_error(file, "truncated: header promises " + std::string(idx_type_name(out.type)) +
                              to_string(out.dims) + " (" + std::to_string(expected) +
                              " bytes of data) but only " + std::to_string(filled) +
                              " bytes follow");
  std::byte extra;
  if (read_some(f.get(), file, &extra, 1) != 0)
    throw idx_error(file, "trailing bytes after the " + std::to_string(expected) +
                              " bytes of data that header " + std::string(idx_type_name(out.type)) +
                              to_string(out.dims) + " promises");
  swap_to_host(out.data, idx_type_bytes(out.type));
  return out;
}

void write_idx(const std::filesystem::path& file, const IdxArray& array, bool gzip) {
  if (array.dims.empty() || array.dims.size() > 255)
    throw std::invalid_argument("sinter: write_idx " + file.string() + ": rank " +
                                std::to_string(array.dims.size()) + " is outside 1..255");
  std::size_t expected = idx_type_bytes(array.type) * static_cast<std::size_t>(numel(array.dims));
  if (array.data.size() != expected)
    throw std::invalid_argument("sinter: write_idx " + file.string() + ": " +
                                std::to_string(array.data.size()) + " data bytes for " +
                                std::string(idx_type_name(array.type)) + to_string(array.dims) +
                                ", which needs " + std::to_string(expected));
  std::vector<std::byte> bytes = {std::byte{0}, std::byte{0}, static_cast<std::byte>(array.type),
                                  static_cast<std::byte>(array.dims.size())};
  for (int64_t d : array.dims)
    for (int shift = 24; shift >= 0; shift -= 8)
      bytes.push_back(static_cast<std::byte>((static_cast<uint64_t>(d) >> shift) & 0xff));
  std::vector<std::byte> data = array.data;
  swap_to_host(data, idx_type_bytes(array.type));
  bytes.insert(bytes.end(), data.begin(), data.end());

  // "T" is zlib's transparent mode: plain bytes through the same API.
  GzHandle f(gzopen(file.c_str(), gzip ? "wb" : "wbT"));
  if (!f)
    throw std::runtime_error("sinter: write_idx " + file.string() +
                             ": cannot open for writing: " + std::strerror(errno));
  std::size_t written = 0;
  while (written < bytes.size()) {
    auto chunk = static_cast<unsigned>(std::min<std::size_t>(bytes.size() - written, 1u << 24));
    if (gzwrite(f.get(), bytes.data() + written, chunk) != static_cast<int>(chunk))
      throw std::runtime_error("sinter: write_idx " + file.string() + ": write failed");
    written += chunk;
  }
  if (gzclose(f.release()) != Z_OK)
    throw std::runtime_error("sinter: write_idx " + file.string() + ": close failed");
}

} // namespace sinter::data
