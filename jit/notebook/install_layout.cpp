// jit/notebook/install_layout.cpp — the kernel's headers, library and prelude, in a build tree or
// an install prefix
#include "jit/notebook/install_layout.hpp"

#include "jit/runtime/kernel_cache.hpp"
#include "jit/settings.hpp"

#include <cstdio>
#include <string>
#include <system_error>
#include <unistd.h>

namespace sinter::notebook {

namespace fs = std::filesystem;

std::optional<fs::path> install_prefix() {
  std::error_code error;
  fs::path program = fs::read_symlink("/proc/self/exe", error);
  const fs::path bindir = SINTER_INSTALL_BINDIR;
  if (error || bindir.is_absolute()) return std::nullopt;
  fs::path prefix = program.parent_path();
  for (auto part = bindir.begin(); part != bindir.end(); ++part)
    prefix = prefix.parent_path();
  if (!fs::exists(prefix / SINTER_INSTALL_INCLUDEDIR / "dsl" / "sinter.hpp", error))
    return std::nullopt;
  return prefix;
}

CellInterpreterOptions kernel_options() {
  CellInterpreterOptions options;
  options.source_root = SINTER_SOURCE_ROOT;
  options.library = SINTER_LIBRARY;
  options.prelude = SINTER_PRELUDE;
  if (std::optional<fs::path> prefix = install_prefix()) {
    options.source_root = (*prefix / SINTER_INSTALL_INCLUDEDIR).string();
    options.library = (*prefix / SINTER_INSTALL_LIBDIR / "libsinter.so").string();
    const fs::path folder = KernelCache::default_dir() / ("kernel-prelude-" SINTER_VERSION);
    options.prelude = (folder / "prelude").string();
    std::error_code error;
    if (!fs::exists(options.prelude + ".pch", error) && !setting("SINTER_KERNEL_PRELUDE")) {
      // Written to a folder of its own, then renamed into place: a kernel started meanwhile
      // never reads half a prelude. Takes about 5 s, once per user and version.
      std::fprintf(stderr, "sinter-kernel: precompiling the prelude into %s (once)\n",
                   folder.c_str());
      const fs::path draft = folder.string() + ".tmp-" + std::to_string(::getpid());
      try {
        fs::create_directories(draft);
        write_prelude(options, (draft / "prelude").string(), "");
        fs::rename(draft, folder, error); // another kernel may have won: its prelude is as good
      } catch (const std::exception& e) { // an unwritable cache, or clang refusing the header
        std::fprintf(stderr, "sinter-kernel: %s; the prelude is parsed in each session\n",
                     e.what());
      }
      fs::remove_all(draft, error);
    }
  }
  // Another precompiled prelude (an installed kernel's), or none when empty.
  if (const char* prelude = setting("SINTER_KERNEL_PRELUDE")) options.prelude = prelude;
  return options;
}

} // namespace sinter::notebook
