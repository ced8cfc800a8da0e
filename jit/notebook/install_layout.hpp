// jit/notebook/install_layout.hpp — where the notebook kernel finds sinter: the build tree it was
// built in, or the install prefix it runs from (docs/install.md)
#pragma once
#include "jit/notebook/cell_interpreter.hpp"

#include <filesystem>
#include <optional>

namespace sinter::notebook {

/// The install prefix when this program runs from one (`<prefix>/<bindir>/sinter-kernel`, with
/// `<prefix>/<includedir>/sinter/dsl/sinter.hpp` installed beside it); nullopt in a build tree.
std::optional<std::filesystem::path> install_prefix();

/// The kernel's options. In a build tree: its headers, library and precompiled prelude. In an
/// install: the prefix's headers and library, and a prelude written once, on first use, to
/// `<cache>/kernel-prelude-<version>/` (the kernel cache's folder: SINTER_CACHE_DIR,
/// XDG_CACHE_HOME or ~/.cache/sinter), since a prelude precompiled in the build tree does not
/// match the installed headers. SINTER_KERNEL_PRELUDE names another prelude (empty: none).
CellInterpreterOptions kernel_options();

} // namespace sinter::notebook
