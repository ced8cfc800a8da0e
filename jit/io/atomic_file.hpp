// jit/io/atomic_file.hpp — writing a whole file so that readers see the old one or the new one
#pragma once
#include <filesystem>
#include <span>
#include <string_view>

namespace sinter {

/// Writes `pieces` one after another to a fresh temporary file beside `file` (named
/// `.<file name>.tmp-<host>-<pid>-…`, so one a crash left can be told apart), fsyncs it and
/// renames it over `file`: a crash or a full disk leaves any previous file as it was. Throws
/// std::runtime_error naming `what` (`checkpoint`, or nothing), the file and the reason.
void write_file_atomically(const std::filesystem::path& file,
                           std::span<const std::string_view> pieces, std::string_view what = "");
/// Removes the temporary files that writes of `file` from this host left beside it when their
/// process died (`kill -9` in the middle of a save): only names of that pattern whose process
/// is gone. Another host's, or a running writer's, are left alone.
void remove_interrupted_writes(const std::filesystem::path& file);
/// The same for one piece of text.
void write_file_atomically(const std::filesystem::path& file, std::string_view text,
                           std::string_view what = "");

} // namespace sinter
