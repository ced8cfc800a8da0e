// jit/io/metrics_log.hpp — a training run's metrics where tools read them: metrics.csv, and a
// TensorBoard event file written directly (the tfevents record format)
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace sinter {

/// Writes a run's metrics into folder `dir` (created if missing):
/// - `metrics.csv`: a header `step,<columns...>`, then one row per record, an empty cell for a
///   column the record lacks. Rows of a resumed run are appended to a file with the same
///   header; a file with another header is refused (std::runtime_error naming both).
/// - `events.out.tfevents.<seconds>.<host>.<pid>.sinter`: TensorBoard's format (length, masked
///   CRC32C, an `Event` protocol buffer, masked CRC32C), each record an Event at its step with a
///   scalar summary per value, tagged with the column's name. TensorBoard reads every event file
///   of the folder, so a resumed run adds its own.
/// Each record is flushed when written: a run killed meanwhile keeps what it logged.
class Logger {
public:
  Logger(std::filesystem::path dir, std::vector<std::string> columns);
  ~Logger();
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  /// One record at `step`: values by column name. A name that is not a column throws
  /// std::invalid_argument naming it and the columns.
  void record(int64_t step, const std::map<std::string, double>& values);

  const std::vector<std::string>& columns() const { return columns_; }
  const std::filesystem::path& csv_file() const { return csv_path_; }
  const std::filesystem::path& events_file() const { return events_path_; }

private:
  void write_event(const std::string& event);

  std::vector<std::string> columns_;
  std::filesystem::path csv_path_, events_path_;
  std::FILE* csv_ = nullptr;
  std::FILE* events_ = nullptr;
};

/// A metrics.csv read back: its columns after `step`, and per row the step and the values (NaN
/// for an empty cell). Throws std::runtime_error naming the file and line of a malformed row.
struct MetricsTable {
  std::vector<std::string> columns;
  std::vector<int64_t> steps;
  std::vector<std::vector<double>> values; ///< values[row][column]
};
MetricsTable read_metrics_csv(const std::filesystem::path& file);

/// CRC-32C (Castagnoli) of `bytes`, and TensorBoard's masked form of a CRC: the checksums of the
/// event file's records.
uint32_t crc32c(std::span<const std::byte> bytes);
uint32_t masked_crc32c(std::span<const std::byte> bytes);

} // namespace sinter
