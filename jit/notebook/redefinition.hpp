// jit/notebook/redefinition.hpp — lets a notebook cell redefine what an earlier cell defined
// (a function, a struct, a variable, a template, an alias): the newest definition wins
#pragma once
#include <string>
#include <vector>

namespace clang {
class CompilerInstance;
class Diagnostic;
} // namespace clang

namespace sinter::notebook {

// Redefinition is on wherever this file is linked in (sinter-kernel): it registers a clang
// frontend plugin that runs ahead of the code generator. A cell's declarations are wrapped in
// an inline namespace of their own (cell_parts, cell_source.hpp), so a new `struct Model` is a
// new type, with symbols of its own in the JIT; once that namespace is parsed, the earlier
// cells' declarations of the same names are hidden from lookup — except function overloads,
// which stay side by side while their signatures name no hidden type. Code compiled earlier
// keeps what it was built with: an object of the old `Model` stays an old `Model`.

/// Starts a journal of the declarations hidden from here on (a part of a cell is about to be
/// parsed); undo_redefinitions() puts them back when that part fails, so a failed cell changes
/// nothing.
void begin_redefinitions();
void undo_redefinitions(clang::CompilerInstance& compiler);

/// The name a diagnostic says is defined twice ("redefinition of 'f'", "… with a different
/// type", "typedef redefinition …", "functions that differ only in their return type …"); empty
/// for every other diagnostic.
std::string redefined_name(const clang::Diagnostic& diagnostic);

/// Hides every earlier cell's declaration named `name` from lookup, so that parsing a cell
/// again can define it anew. False when no cell declared it.
bool hide_cell_declarations(clang::CompilerInstance& compiler, const std::string& name);

} // namespace sinter::notebook
