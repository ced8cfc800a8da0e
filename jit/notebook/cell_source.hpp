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

/// Whether a redefinable declaration defines variables (`auto step = …;`, `Model model{…};`,
/// `HostTensor t;`): those get `inline`, so their names link from later cells.
bool is_variable_definition(std::string_view chunk);

/// The cell with each run of redefinable declarations wrapped in
/// `inline namespace __sinter_cell_<cell> { … }`, #line directives keeping clang's line numbers
/// those of the cell as typed. Variable definitions among them are made `inline`.
std::string wrap_declarations(std::string_view code, unsigned cell);

} // namespace sinter::notebook
