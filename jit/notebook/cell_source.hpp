// jit/notebook/cell_source.hpp — reading a cell's C++ text before clang does: where its top-level
// statements and declarations are, its trailing expression, and the per-cell namespace
// declarations are wrapped in (so a later cell can redefine them)
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sinter::notebook {

/// One top-level piece of a cell: a preprocessor line, or code up to and including a `;` or a
/// block's `}` outside brackets, strings and comments. The blanks and comments before it are
/// part of it. `begin`/`end` are offsets into the cell.
struct CellChunk {
  std::size_t begin = 0, end = 0;
  bool directive = false;
  /// Ended by its own `;` or `}` (the last chunk of a cell may not be).
  bool terminated = true;
};

/// The cell cut into chunks; what follows the last `;` or `}` (a trailing expression, or
/// blanks) is the last chunk.
std::vector<CellChunk> split_cell(std::string_view code);

/// Where the cell's trailing expression (code after the last top-level `;` or `}` that is not
/// blanks or comments) starts; npos when there is none.
std::size_t trailing_expression(std::string_view code);

/// Whether a chunk declares something a later cell may redefine: a variable, a function, a
/// struct/class/union/enum, a template, a typedef or alias. Statements (`step(x, y);`,
/// `x = 3;`, `for (…) {…}`), `using namespace`, `namespace … {}`, `extern "C"`, explicit
/// specialisations and out-of-class member definitions are not: they stay where they are.
bool is_redefinable_declaration(std::string_view chunk);

/// A `#line` directive that makes what follows it count as the cell's line at `offset`, then
/// blanks up to `offset`'s column (none when `offset` is a line's end).
std::string line_directive(std::string_view code, std::size_t offset);

/// Whether a redefinable declaration gets `inline`: one that ends with `;` and declares
/// variables (`auto step = …;`, `Model model{…};`, `Init init(1);`, `HostTensor t;`) or a
/// function without its body. An inline variable has a name later cells link to even when its
/// type involves a lambda (`auto step = compile_step(model, [](…) {…}, …)`); without it each
/// cell would get a copy of its own, never initialised. (On a function declaration `inline`
/// changes nothing that matters.) Not: `static`, `extern`, `thread_local` ones, structs,
/// templates, aliases.
bool takes_inline(std::string_view chunk);

/// One piece of a cell, parsed and run on its own (one clang-repl input), in order.
struct CellPart {
  std::string code;
  bool declarations = false; ///< wrapped in the cell's inline namespace
};

/// The cell as the pieces the kernel runs one after another. A piece is a run of redefinable
/// declarations, wrapped in `inline namespace __sinter_cell_<cell> {…}` (those takes_inline()
/// accepts get `inline`), then the run of statements after it, as they are. A new piece
/// starts at each preprocessor directive and at a declaration that follows a statement; a
/// declaration that initialises in place (`static int n = 0;`) is a piece of its own. Why:
/// clang runs an inline variable's initialiser before the ordinary ones (and the statements)
/// of the same input, so a cell run whole would build `auto step = compile_step(model, …)`
/// before the `model` a statement above it made. Every piece starts with a #line directive
/// (and blanks up to the column), so clang's diagnostics name the cell's own lines and
/// columns.
std::vector<CellPart> cell_parts(std::string_view code, unsigned cell);

} // namespace sinter::notebook
