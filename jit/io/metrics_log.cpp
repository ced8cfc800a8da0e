// jit/io/metrics_log.cpp — metrics.csv rows and TensorBoard event records (protocol buffers
// encoded by hand: an Event holds a wall time, a step and a Summary of tagged scalars)
#include "jit/io/metrics_log.hpp"

#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <unistd.h>

namespace sinter {
namespace {

namespace fs = std::filesystem;

// --- protocol buffer encoding: what Event and Summary need -------------------------------------

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <class T> void little_endian(std::string& out, T value) {
  static_assert(std::endian::native == std::endian::little, "event files are little-endian");
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

/// Field `number` of wire type 2 (length-delimited): a string or a nested message.
void bytes_field(std::string& out, int number, const std::string& bytes) {
  varint(out, static_cast<uint64_t>(number) << 3 | 2);
  varint(out, bytes.size());
  out += bytes;
}

/// Event{wall_time = 1 (double), step = 2 (int64)} and then the rest of its fields.
std::string event_head(int64_t step) {
  std::string e;
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  varint(e, 1 << 3 | 1);
  little_endian(e, now);
  varint(e, 2 << 3 | 0);
  varint(e, static_cast<uint64_t>(step));
  return e;
}

/// Summary.Value{tag = 1, simple_value = 2 (float)}.
std::string scalar_value(const std::string& tag, double value) {
  std::string v;
  bytes_field(v, 1, tag);
  varint(v, 2 << 3 | 5);
  little_endian(v, static_cast<float>(value));
  return v;
}

std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1; // the Castagnoli polynomial, reflected
    table[i] = c;
  }
  return table;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "host";
  return name;
}

std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

std::string header_of(const std::vector<std::string>& columns) {
  std::string h = "step";
  for (const std::string& c : columns)
    h += "," + c;
  return h;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> cells;
  std::size_t start = 0;
  for (;;) {
    std::size_t comma = line.find(',', start);
    cells.push_back(line.substr(start, comma - start));
    if (comma == std::string::npos) return cells;
    start = comma + 1;
  }
}

} // namespace

uint32_t crc32c(std::span<const std::byte> bytes) {
  static const std::array<uint32_t, 256> table = crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (std::byte b : bytes)
    c = table[(c ^ static_cast<uint32_t>(b)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::span<const std::byte> bytes) {
  uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

Logger::Logger(fs::path dir, std::vector<std::string> columns) : columns_(std::move(columns)) {
  for (const std::string& c : columns_)
    if (c.empty() || c == "step" || c.find_first_of(",\n\r\"") != std::string::npos)
      throw std::invalid_argument("sinter: metrics column '" + c +
                                  "' must be a non-empty name other than 'step', without commas, "
                                  "quotes or line breaks");
  std::error_code error;
  fs::create_directories(dir, error);
  if (error)
    throw std::runtime_error("sinter: cannot create the log folder " + dir.string() + ": " +
                             error.message() + " — give --log-dir a folder you can write");
  csv_path_ = dir / "metrics.csv";
  const std::string header = header_of(columns_);
  if (fs::exists(csv_path_, error) && fs::file_size(csv_path_, error) > 0) {
    std::ifstream in(csv_path_);
    std::string first;
    std::getline(in, first);
    if (first != header)
      throw std::runtime_error("sinter: " + csv_path_.string() + " holds another run's metrics ('" +
                               first + "', this run logs '" + header +
                               "') — give --log-dir another folder");
    csv_ = std::fopen(csv_path_.c_str(), "a");
  } else {
    csv_ = std::fopen(csv_path_.c_str(), "w");
    if (csv_) std::fprintf(csv_, "%s\n", header.c_str());
  }
  if (!csv_)
    throw std::runtime_error("sinter: cannot write " + csv_path_.string() + ": " +
                             std::strerror(errno));
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  events_path_ = dir / ("events.out.tfevents." + std::to_string(seconds) + "." + host_name() + "." +
                        std::to_string(::getpid()) + ".sinter");
  events_ = std::fopen(events_path_.c_str(), "wb");
  if (!events_) {
    std::fclose(csv_);
    throw std::runtime_error("sinter: cannot write " + events_path_.string() + ": " +
                             std::strerror(errno));
  }
  std::string version = event_head(0);
  bytes_field(version, 3, "brain.Event:2"); // file_version, what readers check first
  write_event(version);
  std::fflush(csv_);
}

Logger::~Logger() {
  if (csv_) std::fclose(csv_);
  if (events_) std::fclose(events_);
}

void Logger::record(int64_t step, const std::map<std::string, double>& values) {
  std::vector<std::string> cells(columns_.size());
  std::string summary;
  for (const auto& [name, value] : values) {
    std::size_t at = 0;
    while (at < columns_.size() && columns_[at] != name)
      ++at;
    if (at == columns_.size())
      throw std::invalid_argument("sinter: '" + name + "' is not a metrics column (" +
                                  header_of(columns_) + ")");
    cells[at] = csv_number(value);
    bytes_field(summary, 1, scalar_value(name, value));
  }
  std::string row = std::to_string(step);
  for (const std::string& cell : cells)
    row += "," + cell;
  std::fprintf(csv_, "%s\n", row.c_str());
  std::fflush(csv_);
  std::string event = event_head(step);
  bytes_field(event, 5, summary);
  write_event(event);
}

void Logger::write_event(const std::string& event) {
  std::string record;
  little_endian(record, static_cast<uint64_t>(event.size()));
  const uint32_t length_crc = masked_crc32c(std::as_bytes(std::span(record.data(), 8)));
  little_endian(record, length_crc);
  record += event;
  little_endian(record, masked_crc32c(std::as_bytes(std::span(event.data(), event.size()))));
  if (std::fwrite(record.data(), 1, record.size(), events_) != record.size() ||
      std::fflush(events_) != 0)
    throw std::runtime_error("sinter: writing " + events_path_.string() +
                             " failed: " + std::strerror(errno));
}

MetricsTable read_metrics_csv(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("sinter: cannot read " + file.string());
  MetricsTable table;
  std::string line;
  if (!std::getline(in, line) || split(line).front() != "step")
    throw std::runtime_error("sinter: " + file.string() +
                             " is no metrics.csv: its first line must start with 'step'");
  std::vector<std::string> header = split(line);
  table.columns.assign(header.begin() + 1, header.end());
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    std::vector<std::string> cells = split(line);
    auto bad = [&] {
      return std::runtime_error("sinter: " + file.string() + " line " + std::to_string(number) +
                                ": '" + line + "' is not a row of " +
                                std::to_string(header.size()) + " numbers");
    };
    if (cells.size() != header.size()) throw bad();
    int64_t step = 0;
    auto [end, error] = std::from_chars(cells[0].data(), cells[0].data() + cells[0].size(), step);
    if (error != std::errc{} || end != cells[0].data() + cells[0].size()) throw bad();
    std::vector<double> row;
    for (std::size_t c = 1; c < cells.size(); ++c) {
      if (cells[c].empty()) {
        row.push_back(std::numeric_limits<double>::quiet_NaN());
        continue;
      }
      try {
        std::size_t used = 0;
        row.push_back(std::stod(cells[c], &used));
        if (used != cells[c].size()) throw bad();
      } catch (const std::logic_error&) {
        throw bad();
      }
    }
    table.steps.push_back(step);
    table.values.push_back(std::move(row));
  }
  return table;
}

} // namespace sinter
