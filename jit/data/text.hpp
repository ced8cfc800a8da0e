// jit/data/text.hpp — byte-level text data sets for language models, and holdout splits
#pragma once
#include "jit/data/dataset.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

namespace sinter::data {

/// Next-token windows over a byte sequence (tokens 0..255). Window i starts at byte
/// i * context: example = i32 [context] tokens bytes[i*context, +context), label = i32 [context]
/// the same span shifted by one. Windows tile the text without overlap (each byte is predicted
/// once per epoch), so size() = (bytes - 1) / context. Needs at least context + 1 bytes.
std::unique_ptr<Dataset> byte_windows(std::vector<uint8_t> tokens, int64_t context);

/// byte_windows over the bytes of `file`.
std::unique_ptr<Dataset> text_windows(std::filesystem::path file, int64_t context);

/// `$SINTER_FORTUNES_DIR` if set, else `/usr/share/games/fortunes` (Debian package `fortunes`).
std::filesystem::path default_fortunes_dir();

/// One plain-text fortune file (`<fortunes dir>/fortunes`, ~24 KB) for quick runs.
std::filesystem::path default_text_corpus();

/// The plain-text fortune files of `dir` (regular files without an extension, so neither the
/// `.dat` indexes nor the `.u8` links), sorted by name. Throws naming `apt-get install fortunes`
/// and SINTER_FORTUNES_DIR when there are none.
std::vector<std::filesystem::path> fortune_files(const std::filesystem::path& dir);

/// byte_windows over the concatenation of fortune_files(dir) (~2.7 MB with Debian 12's package).
std::unique_ptr<Dataset> fortunes_corpus(int64_t context,
                                         const std::filesystem::path& dir = default_fortunes_dir());

/// Splits deterministically by index: the first size - h examples train, the last
/// h = round(size * holdout_fraction) are held out. Both views share ownership of `dataset`.
/// For byte_windows the holdout's first label byte is the last train window's last label byte;
/// no other byte crosses the split.
std::pair<std::unique_ptr<Dataset>, std::unique_ptr<Dataset>>
split_holdout(std::unique_ptr<Dataset> dataset, double holdout_fraction);

} // namespace sinter::data
