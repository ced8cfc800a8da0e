// jit/notebook/cell_source.cpp — the cell splitter, the declaration classifier and the wrapping
// of declarations in per-cell inline namespaces
#include "jit/notebook/cell_source.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace sinter::notebook {
namespace {

/// Whether `rest` (what follows a `}`) goes on with an expression: `Model{}.forward(x)`,
/// `Point{1, 2} + offset`. Then that `}` closed a braced initialiser, not a statement.
bool continues_expression(std::string_view rest) {
  std::size_t next = rest.find_first_not_of(" \t\r\n");
  if (next == std::string_view::npos) return false;
  if (rest.substr(next, 2) == "->") return true;
  return std::string_view(".[()+/%|^<>=?,").find(rest[next]) != std::string_view::npos;
}

/// Offset just past a comment, string or character literal starting at `i`, or `i` itself
/// when none starts there.
std::size_t skip_literal_or_comment(std::string_view code, std::size_t i) {
  char c = code[i];
  auto next = [&](std::size_t k) { return k < code.size() ? code[k] : '\0'; };
  if (c == '/' && next(i + 1) == '/') {
    std::size_t end = code.find('\n', i);
    return end == std::string_view::npos ? code.size() : end;
  }
  if (c == '/' && next(i + 1) == '*') {
    std::size_t end = code.find("*/", i + 2);
    return end == std::string_view::npos ? code.size() : end + 2;
  }
  if (c == 'R' && next(i + 1) == '"' &&
      (i == 0 || !(std::isalnum(static_cast<unsigned char>(code[i - 1])) || code[i - 1] == '_'))) {
    std::size_t open = code.find('(', i + 2);
    if (open == std::string_view::npos) return code.size();
    std::string close = ")" + std::string(code.substr(i + 2, open - i - 2)) + "\"";
    std::size_t end = code.find(close, open);
    return end == std::string_view::npos ? code.size() : end + close.size();
  }
  if (c == '"' || c == '\'') {
    std::size_t k = i + 1;
    for (; k < code.size() && code[k] != c; ++k)
      if (code[k] == '\\') ++k;
    return std::min(k + 1, code.size());
  }
  return i;
}

bool is_blank(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    std::size_t past = skip_literal_or_comment(text, i);
    if (past != i && text[i] == '/') {
      i = past;
      continue;
    }
    if (!std::isspace(static_cast<unsigned char>(text[i]))) return false;
    ++i;
  }
  return true;
}

/// The cell's tokens, simplified: identifiers and keywords, `::`, `->`, `&&`, or one
/// punctuation character. Comments are skipped; a literal is one token `"`.
std::vector<std::string_view> tokens(std::string_view code, std::size_t limit) {
  std::vector<std::string_view> out;
  for (std::size_t i = 0; i < code.size() && out.size() < limit;) {
    unsigned char c = static_cast<unsigned char>(code[i]);
    if (std::isspace(c)) {
      ++i;
      continue;
    }
    if (std::size_t past = skip_literal_or_comment(code, i); past != i) {
      if (code[i] != '/') out.push_back("\"");
      i = past;
      continue;
    }
    if (std::isalpha(c) || c == '_') {
      std::size_t k = i;
      while (k < code.size() &&
             (std::isalnum(static_cast<unsigned char>(code[k])) || code[k] == '_'))
        ++k;
      out.push_back(code.substr(i, k - i));
      i = k;
      continue;
    }
    std::string_view two = code.substr(i, 2);
    if (two == "::" || two == "->" || two == "&&" || two == "[[") {
      out.push_back(two);
      i += 2;
      continue;
    }
    out.push_back(code.substr(i, 1));
    ++i;
  }
  return out;
}

bool is_identifier(std::string_view token) {
  return !token.empty() && (std::isalpha(static_cast<unsigned char>(token[0])) || token[0] == '_');
}

template <std::size_t N>
bool one_of(std::string_view token, const std::array<std::string_view, N>& words) {
  return std::find(words.begin(), words.end(), token) != words.end();
}

constexpr std::array<std::string_view, 20> statement_keywords{
    "if",       "for",  "while",   "do",    "switch",   "return", "break",
    "continue", "goto", "try",     "throw", "delete",   "new",    "co_return",
    "co_await", "case", "default", "else",  "co_yield", "this"};
constexpr std::array<std::string_view, 22> declaration_keywords{
    "struct",   "class",    "union",        "enum",      "typedef",   "static_assert",
    "inline",   "static",   "constexpr",    "consteval", "constinit", "const",
    "volatile", "auto",     "thread_local", "alignas",   "void",      "bool",
    "char",     "decltype", "concept",      "mutable"};
constexpr std::array<std::string_view, 12> builtin_types{
    "int",      "short",   "long",    "float",    "double",   "signed",
    "unsigned", "wchar_t", "char8_t", "char16_t", "char32_t", "size_t"};

/// A chunk that defines a struct, class, union or enum (perhaps with a typedef or a template
/// head) ends at its `;`, not at its body's `}`: `struct S { … } s;`.
bool defines_type(std::string_view chunk) {
  constexpr std::array<std::string_view, 5> tags{"struct", "class", "union", "enum", "typedef"};
  std::vector<std::string_view> t = tokens(chunk, 64);
  std::size_t i = 0;
  if (i < t.size() && t[i] == "template") { // skip `template <…>`
    int angle = 0;
    for (++i; i < t.size(); ++i) {
      if (t[i] == "<") ++angle;
      if (t[i] == ">" && --angle == 0) {
        ++i;
        break;
      }
    }
  }
  return i < t.size() && one_of(t[i], tags);
}

} // namespace

std::vector<CellChunk> split_cell(std::string_view code) {
  std::vector<CellChunk> chunks;
  std::size_t begin = 0, depth = 0;
  bool line_start = true;
  auto cut = [&](std::size_t end, bool directive, bool terminated = true) {
    chunks.push_back({begin, end, directive, terminated});
    begin = end;
  };
  for (std::size_t i = 0; i < code.size();) {
    char c = code[i];
    if (line_start && c == '#' && depth == 0) { // a directive: to the end of its line
      std::size_t k = i;
      while (k < code.size() && code[k] != '\n')
        k += code[k] == '\\' ? 2 : 1;
      k = std::min(k, code.size());
      cut(k, true);
      i = k;
      continue;
    }
    if (c == '\n') {
      line_start = true;
      ++i;
      continue;
    }
    if (c != ' ' && c != '\t' && c != '\r') line_start = false;
    if (std::size_t past = skip_literal_or_comment(code, i); past != i) {
      i = past;
      continue;
    }
    if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if (c == ')' || c == ']' || c == '}') {
      if (depth > 0) --depth;
      if (c == '}' && depth == 0 && !continues_expression(code.substr(i + 1)) &&
          !defines_type(code.substr(begin, i - begin))) {
        // `auto f = [] { … };`: the chunk ends at the `;` after the brace.
        std::size_t next = code.find_first_not_of(" \t\r\n", i + 1);
        if (next == std::string_view::npos || code[next] != ';') cut(i + 1, false);
      }
    } else if (c == ';' && depth == 0) {
      cut(i + 1, false);
    }
    ++i;
  }
  if (begin < code.size()) cut(code.size(), false, false);
  return chunks;
}

std::size_t trailing_expression(std::string_view code) {
  std::vector<CellChunk> chunks = split_cell(code);
  if (chunks.empty()) return std::string_view::npos;
  const CellChunk& last = chunks.back();
  if (last.directive || last.terminated || is_blank(code.substr(last.begin, last.end - last.begin)))
    return std::string_view::npos;
  return last.begin;
}

bool is_redefinable_declaration(std::string_view chunk) {
  std::vector<std::string_view> t = tokens(chunk, 64);
  if (t.empty()) return false;
  std::size_t i = 0;
  while (i < t.size() && t[i] == "[[") { // attributes
    int depth = 1;
    for (++i; i < t.size() && depth > 0; ++i)
      depth += t[i] == "[" ? 1 : t[i] == "]" ? -1 : 0;
    ++i; // the second `]`
  }
  if (i >= t.size()) return false;
  std::string_view first = t[i];
  if (one_of(first, statement_keywords)) return false;
  if (first == "using") // `using X = …;` is an alias; `using namespace`/`using a::b;` are not
    return i + 2 < t.size() && is_identifier(t[i + 1]) && t[i + 1] != "namespace" &&
           t[i + 2] == "=";
  if (first == "namespace" || first == "extern" || first == "export" || first == "module" ||
      first == "import" || first == "friend" || first == "operator")
    return false;
  if (first == "template") // not `template <>` (a specialisation) or `template class X<int>;`
    return i + 2 < t.size() && t[i + 1] == "<" && t[i + 2] != ">";
  // A qualified declarator (`int Model::size() const {…}`, `Model::Model() {}`) defines a
  // member of a class that lives where it was declared: the name before the first `(`, `=`,
  // `{` or `;` outside template arguments follows a `::`.
  int angle = 0;
  for (std::size_t k = i; k < t.size(); ++k) {
    if (t[k] == "<") ++angle;
    if (t[k] == ">" && angle > 0) --angle;
    if (angle == 0 && (t[k] == "(" || t[k] == "=" || t[k] == "{" || t[k] == ";")) {
      if (k >= 2 && t[k - 2] == "::") return false;
      break;
    }
  }
  if (one_of(first, declaration_keywords) || one_of(first, builtin_types)) return true;
  if (!is_identifier(first)) return false; // `*p = 1;`, `++i;`, `(void)f();`
  // A type name: `a::b<…>::c`, then `*`, `&`, `&&`, `const`; then a declarator identifier.
  std::size_t k = i;
  for (;;) {
    if (k >= t.size() || !is_identifier(t[k])) return false;
    ++k;
    if (k < t.size() && t[k] == "<") { // template arguments, balanced
      int angle = 0;
      for (; k < t.size(); ++k) {
        if (t[k] == "<") ++angle;
        if (t[k] == ">" && --angle == 0) break;
        if (t[k] == ";" || t[k] == "{") return false; // `a < b;`: a comparison
      }
      if (k >= t.size()) return false;
      ++k;
    }
    if (k < t.size() && t[k] == "::") {
      ++k;
      continue;
    }
    break;
  }
  while (k < t.size() && (t[k] == "*" || t[k] == "&" || t[k] == "&&" || t[k] == "const"))
    ++k;
  if (k >= t.size() || !is_identifier(t[k]) || one_of(t[k], statement_keywords)) return false;
  return k + 1 >= t.size() || t[k + 1] != "::"; // not `Var Model::forward(…)`
}

std::string line_directive(std::string_view code, std::size_t offset) {
  std::size_t line =
      1 + static_cast<std::size_t>(std::count(code.begin(), code.begin() + offset, '\n'));
  std::string out = "#line " + std::to_string(line) + "\n";
  std::size_t line_begin = offset == 0 ? std::string_view::npos : code.rfind('\n', offset - 1);
  line_begin = line_begin == std::string_view::npos ? 0 : line_begin + 1;
  if (offset < code.size() && code[offset] != '\n') out.append(offset - line_begin, ' ');
  return out;
}

namespace {

bool ends_with_semicolon(std::string_view text) {
  std::size_t last = text.find_last_not_of(" \t\r\n");
  return last != std::string_view::npos && text[last] == ';';
}

/// takes_inline() for a chunk already known to be a redefinable declaration.
bool declares_inline_candidate(std::string_view chunk) {
  if (!ends_with_semicolon(chunk)) return false;
  std::vector<std::string_view> t = tokens(chunk, 64);
  constexpr std::array<std::string_view, 16> not_variables{
      "static", "extern", "inline", "thread_local",  "template", "typedef",   "using", "struct",
      "class",  "union",  "enum",   "static_assert", "concept",  "constinit", "[[",    "friend"};
  if (t.empty() || one_of(t[0], not_variables)) return false;
  // The first `(`, `=`, `{`, `[` or `;` outside template arguments, right after the declared
  // name: a variable (`= …`, `{…}`, `(…)`, `;`) or a function's declaration (`(…);`), never
  // a function's body (the chunk would end with `}`).
  int angle = 0;
  for (std::size_t k = 0; k < t.size(); ++k) {
    if (t[k] == "<") ++angle;
    if (t[k] == ">" && angle > 0) --angle;
    if (angle > 0) continue;
    if (t[k] == "=" || t[k] == ";" || t[k] == "{" || t[k] == "(" || t[k] == "[")
      return k >= 2 && is_identifier(t[k - 1]) && t[k - 1] != "const" && t[k - 1] != "operator";
  }
  return false;
}

/// For a declaration that does not take `inline`: whether it defines variables all the same
/// (`static int n = 0;`, `extern`, `thread_local`, `constinit` ones, `struct S { … } s;`).
/// Its initialiser runs with the ordinary ones, after the inline variables of the same input.
bool initialises_in_place(std::string_view chunk) {
  if (!ends_with_semicolon(chunk)) return false;
  std::vector<std::string_view> t = tokens(chunk, 1 << 20);
  constexpr std::array<std::string_view, 4> storage{"static", "extern", "thread_local",
                                                    "constinit"};
  constexpr std::array<std::string_view, 4> tags{"struct", "class", "union", "enum"};
  if (t.empty()) return false;
  if (one_of(t[0], storage)) return true;
  if (!one_of(t[0], tags)) return false;
  // `struct S { … } s;`: a name between the body's `}` and the `;`.
  auto close = std::find(t.rbegin(), t.rend(), std::string_view("}"));
  return close != t.rend() && std::any_of(t.rbegin() + 1, close, is_identifier);
}

} // namespace

bool takes_inline(std::string_view chunk) {
  return is_redefinable_declaration(chunk) && declares_inline_candidate(chunk);
}

std::vector<CellPart> cell_parts(std::string_view code, unsigned cell) {
  std::vector<CellPart> parts;
  auto position = [&](std::size_t offset) { return line_directive(code, offset); };
  const std::string open = "inline namespace __sinter_cell_" + std::to_string(cell) + " {\n";
  // Where the last part is: taking declarations (inside the namespace), taking statements
  // (after them), or closed (a directive, or a declaration that had to be alone).
  enum class Phase { closed, declarations, statements };
  Phase phase = Phase::closed;
  auto close_namespace = [&] {
    if (phase == Phase::declarations) parts.back().code += "\n}\n";
  };
  for (const CellChunk& chunk : split_cell(code)) {
    std::string_view text = code.substr(chunk.begin, chunk.end - chunk.begin);
    if (is_blank(text)) continue;
    if (chunk.directive) {
      close_namespace();
      parts.push_back({position(chunk.begin) + std::string(text), false});
      phase = Phase::closed;
      continue;
    }
    if (!is_redefinable_declaration(text)) { // a statement: after the declarations before it
      if (phase == Phase::declarations) {
        close_namespace();
        parts.back().code += position(chunk.begin);
      } else if (phase == Phase::closed) {
        parts.push_back({position(chunk.begin), false});
      }
      parts.back().code += text;
      phase = Phase::statements;
      continue;
    }
    // A declaration. After a statement it starts a new part: an inline variable's initialiser
    // would otherwise run before that statement. One that initialises in place (`static int
    // n = 0;`) runs with the statements, after the inline variables of its part: alone.
    bool gets_inline = declares_inline_candidate(text);
    bool alone = !gets_inline && initialises_in_place(text);
    if (phase != Phase::declarations || alone) {
      close_namespace();
      parts.push_back({open + position(chunk.begin), true});
    }
    CellPart& part = parts.back();
    if (gets_inline) {
      // `inline`, on a line of its own so the columns stay: see the header. (The blanks and
      // comments before it go: they change nothing.)
      std::size_t first = chunk.begin;
      while (first < chunk.end) {
        std::size_t past = skip_literal_or_comment(code, first);
        if (past != first && code[first] == '/')
          first = past;
        else if (std::isspace(static_cast<unsigned char>(code[first])))
          ++first;
        else
          break;
      }
      if (!part.code.empty() && part.code.back() != '\n' && part.code.back() != ' ')
        part.code += '\n';
      part.code += "inline\n" + position(first);
      part.code += code.substr(first, chunk.end - first);
    } else {
      part.code += text;
    }
    phase = Phase::declarations;
    if (alone) { // the statements after it may join it, declarations may not
      close_namespace();
      parts.back().code += position(chunk.end);
      phase = Phase::statements;
    }
  }
  close_namespace();
  return parts;
}

} // namespace sinter::notebook
