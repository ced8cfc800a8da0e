// jit/data/text.cpp — byte windows over text files, the fortunes corpus and index-range splits
#include "jit/data/text.hpp"
#include "jit/settings.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace sinter::data {
namespace {

class ByteWindows final : public Dataset {
public:
  ByteWindows(std::vector<uint8_t> tokens, int64_t context)
      : tokens_(std::move(tokens)), context_(context) {}

  std::size_t size() const override {
    return (tokens_.size() - 1) / static_cast<std::size_t>(context_);
  }
  TensorType example_type() const override { return {DType::i32, {context_}}; }
  TensorType label_type() const override { return {DType::i32, {context_}}; }

  void read(std::size_t index, std::byte* example, std::byte* label) const override {
    if (index >= size())
      throw std::out_of_range("sinter: text window " + std::to_string(index) +
                              " out of range (size " + std::to_string(size()) + ")");
    const uint8_t* start = tokens_.data() + index * static_cast<std::size_t>(context_);
    for (int64_t t = 0; t < context_; ++t) {
      int32_t x = start[t], y = start[t + 1];
      std::memcpy(example + t * 4, &x, 4);
      std::memcpy(label + t * 4, &y, 4);
    }
  }

private:
  std::vector<uint8_t> tokens_;
  int64_t context_;
};

/// A contiguous index range of a shared data set.
class IndexRange final : public Dataset {
public:
  IndexRange(std::shared_ptr<const Dataset> base, std::size_t begin, std::size_t count)
      : base_(std::move(base)), begin_(begin), count_(count) {}

  std::size_t size() const override { return count_; }
  TensorType example_type() const override { return base_->example_type(); }
  TensorType label_type() const override { return base_->label_type(); }
  void read(std::size_t index, std::byte* example, std::byte* label) const override {
    if (index >= count_)
      throw std::out_of_range("sinter: split index " + std::to_string(index) +
                              " out of range (size " + std::to_string(count_) + ")");
    base_->read(begin_ + index, example, label);
  }

private:
  std::shared_ptr<const Dataset> base_;
  std::size_t begin_, count_;
};

std::vector<uint8_t> read_bytes(const std::filesystem::path& file) {
  // A directory, a device (/dev/zero never ends) or a pipe is no text to train on.
  std::error_code error;
  std::filesystem::file_status status = std::filesystem::status(file, error);
  if (!error && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    throw std::runtime_error("sinter: text file " + file.string() +
                             " is not a regular file (a directory, device or pipe): give a file "
                             "of text");
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw std::runtime_error("sinter: cannot open text file " + file.string() + ": " +
                             std::strerror(errno));
  std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad())
    throw std::runtime_error("sinter: reading text file " + file.string() +
                             " failed: " + std::strerror(errno));
  return bytes;
}

std::string fortunes_hint() {
  return "install Debian's fortune files (`apt-get install fortunes`) or set SINTER_FORTUNES_DIR "
         "to a directory of plain-text fortune files";
}

} // namespace

std::unique_ptr<Dataset> byte_windows(std::vector<uint8_t> tokens, int64_t context) {
  if (context < 1)
    throw std::invalid_argument("sinter: byte_windows context " + std::to_string(context) +
                                " must be at least 1");
  if (tokens.size() < static_cast<std::size_t>(context) + 1)
    throw std::invalid_argument("sinter: byte_windows over " + std::to_string(tokens.size()) +
                                " bytes with context " + std::to_string(context) +
                                ": needs at least context + 1 = " + std::to_string(context + 1) +
                                " bytes for one window and its shifted labels");
  return std::make_unique<ByteWindows>(std::move(tokens), context);
}

std::unique_ptr<Dataset> text_windows(std::filesystem::path file, int64_t context) {
  std::vector<uint8_t> bytes = read_bytes(file);
  try {
    return byte_windows(std::move(bytes), context);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(e.what()) + " (file " + file.string() + ")");
  }
}

std::filesystem::path default_fortunes_dir() {
  const char* env = setting("SINTER_FORTUNES_DIR");
  if (env && *env) return env;
  return "/usr/share/games/fortunes";
}

std::filesystem::path default_text_corpus() { return default_fortunes_dir() / "fortunes"; }

std::vector<std::filesystem::path> fortune_files(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw std::runtime_error("sinter: fortunes directory " + dir.string() + " does not exist; " +
                             fortunes_hint());
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    // NOTE: the .u8 names are symlinks to the text files (or UTF-8 copies in older packages)
    // and .dat are strfile's binary indexes; only extension-less regular files are the text.
    if (entry.is_symlink() || !entry.is_regular_file()) continue;
    if (entry.path().has_extension()) continue;
    files.push_back(entry.path());
  }
  if (files.empty())
    throw std::runtime_error("sinter: no plain-text fortune files in " + dir.string() + "; " +
                             fortunes_hint());
  std::sort(files.begin(), files.end());
  return files;
}

std::unique_ptr<Dataset> fortunes_corpus(int64_t context, const std::filesystem::path& dir) {
  std::vector<uint8_t> corpus;
  for (const auto& file : fortune_files(dir)) {
    std::vector<uint8_t> bytes = read_bytes(file);
    corpus.insert(corpus.end(), bytes.begin(), bytes.end());
  }
  return byte_windows(std::move(corpus), context);
}

std::pair<std::unique_ptr<Dataset>, std::unique_ptr<Dataset>>
split_holdout(std::unique_ptr<Dataset> dataset, double holdout_fraction) {
  if (!dataset) throw std::invalid_argument("sinter: split_holdout of a null data set");
  if (!(holdout_fraction >= 0.0 && holdout_fraction <= 1.0))
    throw std::invalid_argument("sinter: split_holdout fraction " +
                                std::to_string(holdout_fraction) + " is outside [0, 1]");
  std::size_t n = dataset->size();
  auto holdout = static_cast<std::size_t>(std::llround(static_cast<double>(n) * holdout_fraction));
  std::shared_ptr<const Dataset> shared = std::move(dataset);
  return {std::make_unique<IndexRange>(shared, 0, n - holdout),
          std::make_unique<IndexRange>(shared, n - holdout, holdout)};
}

} // namespace sinter::data
