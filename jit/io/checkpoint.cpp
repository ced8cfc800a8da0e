// jit/io/checkpoint.cpp — safetensors layout, atomic writer, validating reader
#include "jit/io/checkpoint.hpp"
#include "jit/io/atomic_file.hpp"

#include "jit/io/json.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace sinter {
namespace {

namespace fs = std::filesystem;

// NOTE: safetensors data is little-endian; HostTensor bytes are native, copied verbatim.
static_assert(
    std::endian::native == std::endian::little,
    "checkpoint.cpp copies tensor bytes verbatim; add byte swapping for big-endian hosts");

/// The reference reader refuses headers above 100 MB; so do we, before allocating for one.
constexpr uint64_t max_header_bytes = 100'000'000;
constexpr std::string_view metadata_key = "__metadata__";

std::string_view safetensors_name(DType t) {
  switch (t) {
  case DType::f32: return "F32";
  case DType::f64: return "F64";
  case DType::bf16: return "BF16";
  case DType::f16: return "F16";
  case DType::i32: return "I32";
  case DType::i64: return "I64";
  case DType::boolean: return "BOOL";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (DType t : all_dtypes)
    if (safetensors_name(t) == name) return t;
  return std::nullopt;
}

/// The position of a dtype in safetensors' `Dtype` enum, which is ordered by alignment; the
/// writer lays data out by descending rank so every tensor starts aligned to its element size.
int safetensors_rank(DType t) {
  switch (t) {
  case DType::boolean: return 0;
  case DType::f16: return 7;
  case DType::bf16: return 8;
  case DType::i32: return 9;
  case DType::f32: return 11;
  case DType::f64: return 12;
  case DType::i64: return 13;
  }
  return -1;
}

std::string as_json_string(std::string_view s) {
  std::string out;
  json::append_quoted(out, s);
  return out;
}

// ---- writing -------------------------------------------------------------------------------

struct Entry {
  std::string_view name;
  const HostTensor* tensor;
};

std::vector<Entry>
ordered_entries(std::span<const std::pair<std::string, const HostTensor*>> tensors) {
  std::vector<Entry> entries;
  entries.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    if (tensor == nullptr)
      throw std::invalid_argument("sinter: save_safetensors: tensor " + as_json_string(name) +
                                  " is a null pointer");
    if (name == metadata_key)
      throw std::invalid_argument(
          "sinter: save_safetensors: \"__metadata__\" is reserved for the header's metadata; "
          "rename the tensor");
    if (!json::is_valid_utf8(name))
      throw std::invalid_argument("sinter: save_safetensors: tensor name " + as_json_string(name) +
                                  " is not valid UTF-8");
    for (int64_t d : tensor->shape())
      if (d < 0)
        throw std::invalid_argument("sinter: save_safetensors: tensor " + as_json_string(name) +
                                    " has a negative dim in shape " + to_string(tensor->shape()));
    entries.push_back({name, tensor});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    int ra = safetensors_rank(a.tensor->dtype()), rb = safetensors_rank(b.tensor->dtype());
    return ra != rb ? ra > rb : a.name < b.name;
  });
  std::set<std::string_view> seen;
  for (const Entry& e : entries)
    if (!seen.insert(e.name).second)
      throw std::invalid_argument("sinter: save_safetensors: tensor name " +
                                  as_json_string(e.name) +
                                  " appears twice; checkpoint names must be unique");
  return entries;
}

/// The JSON header, padded with spaces to a multiple of 8 bytes, as the reference writer does.
std::string make_header(const std::vector<Entry>& entries,
                        const std::map<std::string, std::string>& metadata) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!json::is_valid_utf8(key) || !json::is_valid_utf8(value))
        throw std::invalid_argument("sinter: save_safetensors: metadata entry " +
                                    as_json_string(key) + " is not valid UTF-8");
      if (!first) h += ',';
      first = false;
      json::append_quoted(h, key);
      h += ':';
      json::append_quoted(h, value);
    }
    h += '}';
    if (!entries.empty()) h += ',';
  }
  uint64_t offset = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const HostTensor& t = *entries[i].tensor;
    if (i) h += ',';
    json::append_quoted(h, entries[i].name);
    h += ":{\"dtype\":\"";
    h += safetensors_name(t.dtype());
    h += "\",\"shape\":[";
    for (std::size_t d = 0; d < t.shape().size(); ++d) {
      if (d) h += ',';
      h += std::to_string(t.shape()[d]);
    }
    uint64_t end = offset + t.bytes().size();
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

// ---- reading -------------------------------------------------------------------------------

/// A checkpoint file open for reading; reads exactly the bytes asked for or throws.
class InputFile {
public:
  explicit InputFile(const fs::path& file) : file_(file) {
    fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(std::strerror(errno));
    struct stat st{};
    if (::fstat(fd_, &st) != 0) fail(std::strerror(errno));
    if (S_ISDIR(st.st_mode)) fail("it is a directory");
    size_ = static_cast<uint64_t>(st.st_size);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  uint64_t size() const { return size_; }

  void read_at(uint64_t offset, void* into, std::size_t count) const {
    auto* p = static_cast<char*>(into);
    while (count > 0) {
      ssize_t n = ::pread(fd_, p, count, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(std::strerror(errno));
      if (n == 0) fail("the file shrank while it was being read");
      p += n;
      offset += static_cast<uint64_t>(n);
      count -= static_cast<std::size_t>(n);
    }
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("sinter: cannot read checkpoint " + file_.string() + ": " + what);
  }

  const fs::path& file_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

struct TensorEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

class HeaderReader {
public:
  explicit HeaderReader(const fs::path& file) : file_(file) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("sinter: invalid safetensors checkpoint " + file_.string() + ": " +
                             what);
  }

  const json::Value& member(const json::Value& object, std::string_view key,
                            const std::string& where) const {
    for (const auto& [k, v] : object.members)
      if (k == key) return v;
    fail(where + " has no \"" + std::string(key) + "\"");
  }

  uint64_t integer(const json::Value& v, const std::string& where) const {
    if (!v.is(json::Value::Kind::integer)) fail(where + " must be a non-negative integer");
    return v.integer;
  }

  std::map<std::string, std::string> metadata(const json::Value& v) const {
    if (!v.is(json::Value::Kind::object)) fail("\"__metadata__\" must be an object of strings");
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : v.members) {
      if (!value.is(json::Value::Kind::string))
        fail("metadata value for " + as_json_string(key) +
             " is not a string (safetensors metadata is "
             "string to string)");
      out.emplace(key, value.text);
    }
    return out;
  }

  TensorEntry tensor(const std::string& name, const json::Value& v) const {
    std::string where = "tensor " + as_json_string(name);
    if (!v.is(json::Value::Kind::object)) fail(where + " must be an object");
    for (const auto& [key, ignored] : v.members)
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        fail(where + " has an unknown field " + as_json_string(key));
    TensorEntry e{.name = name};

    const json::Value& dtype = member(v, "dtype", where);
    if (!dtype.is(json::Value::Kind::string)) fail(where + ": \"dtype\" must be a string");
    std::optional<DType> t = dtype_from_safetensors_name(dtype.text);
    if (!t)
      fail(where + " has unsupported dtype " + as_json_string(dtype.text) +
           " (sinter reads F32, F64, BF16, F16, I32, I64 and BOOL)");
    e.dtype = *t;

    const json::Value& shape = member(v, "shape", where);
    if (!shape.is(json::Value::Kind::array)) fail(where + ": \"shape\" must be an array");
    uint64_t bytes = dtype_bytes(e.dtype);
    for (const json::Value& d : shape.elements) {
      uint64_t dim = integer(d, where + ": each dim of \"shape\"");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim != 0 && bytes > std::numeric_limits<uint64_t>::max() / dim))
        fail(where + " has a shape whose byte size overflows 64 bits");
      bytes *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }

    const json::Value& offsets = member(v, "data_offsets", where);
    if (!offsets.is(json::Value::Kind::array) || offsets.elements.size() != 2)
      fail(where + ": \"data_offsets\" must be [begin, end]");
    e.begin = integer(offsets.elements[0], where + ": data_offsets[0]");
    e.end = integer(offsets.elements[1], where + ": data_offsets[1]");
    if (e.end < e.begin)
      fail(where + " has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
           "] that end before they begin");
    if (e.end - e.begin != bytes)
      fail(where + " is " + std::string(dtype_name(e.dtype)) + to_string(e.shape) + " (" +
           std::to_string(bytes) + " bytes) but its data_offsets [" + std::to_string(e.begin) +
           ", " + std::to_string(e.end) + "] span " + std::to_string(e.end - e.begin) + " bytes");
    return e;
  }

private:
  const fs::path& file_;
};

} // namespace

void save_safetensors(const fs::path& file,
                      std::span<const std::pair<std::string, const HostTensor*>> tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Entry> entries = ordered_entries(tensors);
  std::string header = make_header(entries, metadata);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));

  std::vector<std::string_view> pieces{
      std::string_view(reinterpret_cast<const char*>(length), sizeof length), header};
  for (const Entry& e : entries) {
    auto bytes = e.tensor->bytes();
    pieces.emplace_back(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  remove_interrupted_writes(file); // what a save killed before its rename left here
  write_file_atomically(file, pieces, "checkpoint");
}

Checkpoint load_safetensors(const fs::path& file) {
  InputFile input(file);
  HeaderReader reader(file);
  if (input.size() < 8)
    reader.fail("the file is " + std::to_string(input.size()) +
                " bytes, shorter than the 8-byte header length (truncated?)");
  unsigned char length[8];
  input.read_at(0, length, sizeof length);
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i)
    header_size |= static_cast<uint64_t>(length[i]) << (8 * i);
  uint64_t available = input.size() - 8;
  if (header_size > available)
    reader.fail("the header length " + std::to_string(header_size) + " runs past the end of the " +
                std::to_string(input.size()) + "-byte file (truncated?)");
  if (header_size > max_header_bytes)
    reader.fail("the header is " + std::to_string(header_size) + " bytes, above the 100 MB limit");

  std::string header(static_cast<std::size_t>(header_size), '\0');
  input.read_at(8, header.data(), header.size());
  if (header.empty() || header.front() != '{') reader.fail("the header does not start with '{'");
  json::Value root;
  try {
    root = json::parse(header);
  } catch (const json::ParseError& e) {
    reader.fail(std::string("the header is not valid JSON: ") + e.what());
  }
  if (!root.is(json::Value::Kind::object)) reader.fail("the header is not a JSON object");

  Checkpoint out;
  std::vector<TensorEntry> entries;
  for (const auto& [name, value] : root.members) {
    if (name == metadata_key)
      out.metadata = reader.metadata(value);
    else
      entries.push_back(reader.tensor(name, value));
  }

  // The data section must be tiled exactly: sorted by offset, each tensor starts where the
  // previous one ended, and the last one ends at the end of the file.
  std::sort(entries.begin(), entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t data_size = available - header_size;
  uint64_t cursor = 0;
  for (const TensorEntry& e : entries) {
    std::string span = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin < cursor)
      reader.fail("tensor " + as_json_string(e.name) + " at data_offsets " + span +
                  " overlaps the previous tensor, which ends at " + std::to_string(cursor));
    if (e.begin > cursor)
      reader.fail("tensor " + as_json_string(e.name) + " at data_offsets " + span +
                  " leaves a gap after byte " + std::to_string(cursor) + " of the data");
    if (e.end > data_size)
      reader.fail("tensor " + as_json_string(e.name) + " at data_offsets " + span +
                  " runs past the end of the " + std::to_string(data_size) +
                  "-byte data section (truncated?)");
    cursor = e.end;
  }
  if (cursor != data_size)
    reader.fail("the data section is " + std::to_string(data_size) + " bytes but the tensors " +
                "cover only " + std::to_string(cursor) + " (trailing garbage)");

  // Only now, with every size known to fit in the file, allocate and read the tensors.
  uint64_t data_start = 8 + header_size;
  for (TensorEntry& e : entries) {
    HostTensor t(e.dtype, std::move(e.shape));
    input.read_at(data_start + e.begin, t.bytes().data(), t.bytes().size());
    out.tensors.emplace(std::move(e.name), std::move(t));
  }
  return out;
}

void require_finite(const HostTensor& tensor, const std::string& name,
                    const std::filesystem::path& file, bool non_negative) {
  const std::byte* data = tensor.bytes().data();
  auto refuse = [&](int64_t i, double value) {
    throw std::runtime_error(
        "sinter: " + file.string() + ": tensor '" + name + "' holds " + std::to_string(value) +
        " at element " + std::to_string(i) +
        (std::isfinite(value) ? " where only values of 0 or more can be"
                              : ": the run that wrote it diverged") +
        "; load an earlier checkpoint (or retrain) — non-finite weights would train on NaN");
  };
  // Bit tests (every exponent bit set: inf or NaN; the sign bit on a value other than -0:
  // negative) in blocks, with the slow look at values only in a block that has one: a
  // GPT-2-small file is 124 M values.
  auto scan = [&]<class Bits>(Bits exponent) {
    const Bits sign = Bits(Bits{1} << (8 * sizeof(Bits) - 1));
    const int64_t count = tensor.size();
    constexpr int64_t block = 4096;
    for (int64_t start = 0; start < count; start += block) {
      const int64_t end = std::min(count, start + block);
      bool bad = false;
      for (int64_t i = start; i < end; ++i) {
        Bits bits;
        std::memcpy(&bits, data + static_cast<int64_t>(sizeof(Bits)) * i, sizeof(Bits));
        bad |= (bits & exponent) == exponent ||
               (non_negative && (bits & sign) != 0 && (bits & Bits(~sign)) != 0);
      }
      if (!bad) continue;
      for (int64_t i = start; i < end; ++i) {
        double v = tensor.at(i);
        if (!std::isfinite(v) || (non_negative && v < 0)) refuse(i, v);
      }
    }
  };
  switch (tensor.dtype()) {
  case DType::f32: scan(uint32_t{0x7f800000u}); break;
  case DType::f64: scan(uint64_t{0x7ff0000000000000u}); break;
  case DType::bf16: scan(uint16_t{0x7f80u}); break;
  case DType::f16: scan(uint16_t{0x7c00u}); break;
  default: break;
  }
}

void require_counts(const HostTensor& tensor, const std::string& name,
                    const std::filesystem::path& file) {
  constexpr double most = 9007199254740992.0; // 2^53: every count below is exact in a double
  for (int64_t i = 0; i < tensor.size(); ++i) {
    const double v = tensor.at(i);
    if (!(v >= 0 && v <= most && v == std::floor(v)))
      throw std::runtime_error("sinter: " + file.string() + ": tensor '" + name + "' holds " +
                               std::to_string(v) + " at element " + std::to_string(i) +
                               ", where only a count (a whole number from 0 to 2^53) can be: "
                               "the checkpoint was edited or damaged; resume from another one");
  }
}

int64_t metadata_integer(const std::map<std::string, std::string>& metadata, const std::string& key,
                         const std::filesystem::path& file, int64_t min, int64_t max) {
  auto found = metadata.find(key);
  if (found == metadata.end())
    throw std::runtime_error("sinter: checkpoint " + file.string() + " has no '" + key +
                             "' metadata: it was not written by save_checkpoint, or was edited");
  const std::string& text = found->second;
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size() || value < min ||
      value > max)
    throw std::runtime_error("sinter: checkpoint " + file.string() + ": metadata '" + key +
                             "' is '" + text + "', not an integer from " + std::to_string(min) +
                             " to " + std::to_string(max) +
                             " — the file was edited or damaged; resume from another checkpoint");
  return value;
}

} // namespace sinter
