// jit/notebook/cell_interpreter.cpp — clang::Interpreter set up for sinter cells: diagnostics
// captured per cell, exceptions caught, trailing values shown
#include "jit/notebook/cell_interpreter.hpp"

#include <clang/Basic/DiagnosticOptions.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <clang/Interpreter/Interpreter.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>

#include <cxxabi.h>
#include <exception>
#include <stdexcept>
#include <typeinfo>

namespace sinter::notebook {

struct CellInterpreter::State {
  std::string diagnostics;
  llvm::raw_string_ostream diagnostics_stream{diagnostics};
  std::unique_ptr<clang::TextDiagnosticPrinter> printer;
  std::unique_ptr<clang::Interpreter> interpreter;
};

namespace {

std::string error_text(llvm::Error error) {
  std::string text;
  llvm::handleAllErrors(std::move(error),
                        [&](const llvm::ErrorInfoBase& info) { text += info.message(); });
  return text;
}

/// The demangled name of the exception in flight's type.
std::string exception_type_name() {
  std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) return "unknown exception";
  int status = 0;
  char* name = abi::__cxa_demangle(type->name(), nullptr, nullptr, &status);
  std::string out = status == 0 && name ? name : type->name();
  std::free(name);
  return out;
}

/// Where a cell's trailing expression starts: after the last `;`, `}` or preprocessor line at
/// the top level (outside brackets, strings and comments), when something other than blanks
/// and comments follows. Otherwise npos.
std::size_t trailing_expression(std::string_view code) {
  std::size_t boundary = 0, depth = 0, i = 0;
  bool line_start = true;
  for (; i < code.size(); ++i) {
    char c = code[i];
    if (line_start && c == '#' && depth == 0) { // a directive: to the end of its line
      while (i < code.size() && code[i] != '\n')
        i += code[i] == '\\' ? 2 : 1;
      boundary = std::min(i, code.size());
      continue;
    }
    if (c == '\n') {
      line_start = true;
      continue;
    }
    if (c != ' ' && c != '\t' && c != '\r') line_start = false;
    if (c == '/' && i + 1 < code.size() && code[i + 1] == '/') {
      while (i + 1 < code.size() && code[i + 1] != '\n')
        ++i;
    } else if (c == '/' && i + 1 < code.size() && code[i + 1] == '*') {
      std::size_t end = code.find("*/", i + 2);
      i = end == std::string_view::npos ? code.size() : end + 1;
    } else if (c == 'R' && i + 1 < code.size() && code[i + 1] == '"') { // R"delim( ... )delim"
      std::size_t open = code.find('(', i + 2);
      if (open == std::string_view::npos) return std::string_view::npos;
      std::string close = ")" + std::string(code.substr(i + 2, open - i - 2)) + "\"";
      std::size_t end = code.find(close, open);
      i = end == std::string_view::npos ? code.size() : end + close.size() - 1;
    } else if (c == '"' || c == '\'') {
      for (++i; i < code.size() && code[i] != c; ++i)
        if (code[i] == '\\') ++i;
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if (c == ')' || c == ']' || c == '}') {
      if (depth > 0) --depth;
      if (c == '}' && depth == 0) boundary = i + 1;
    } else if (c == ';' && depth == 0) {
      boundary = i + 1;
    }
  }
  // Only blanks and comments after the boundary: no trailing expression.
  for (std::size_t j = boundary; j < code.size(); ++j) {
    char c = code[j];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if (code.substr(j, 2) == "//") {
      j = code.find('\n', j);
      if (j == std::string_view::npos) return std::string_view::npos;
      continue;
    }
    if (code.substr(j, 2) == "/*") {
      j = code.find("*/", j);
      if (j == std::string_view::npos) return std::string_view::npos;
      ++j;
      continue;
    }
    return boundary;
  }
  return std::string_view::npos;
}

} // namespace

CellInterpreter::CellInterpreter(const CellInterpreterOptions& options)
    : state_(std::make_unique<State>()) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  // -O0: at -O1 an inline function emitted for one cell is dropped from its module, and a later
  // cell that needs it fails to link (clang-repl keeps no copy). Cells are glue: the work runs
  // in libsinter and its JIT-compiled kernels.
  std::vector<std::string> flags{"-std=c++20", "-O0", "-fexceptions", "-I" + options.source_root};
  flags.insert(flags.end(), options.flags.begin(), options.flags.end());
  std::vector<const char*> args;
  for (const std::string& f : flags)
    args.push_back(f.c_str());
  clang::IncrementalCompilerBuilder builder;
  builder.SetCompilerArgs(args);
  auto compiler = builder.CreateCpp();
  if (!compiler)
    throw std::runtime_error("sinter-kernel: cannot set up clang: " +
                             error_text(compiler.takeError()));
  auto interpreter = clang::Interpreter::create(std::move(*compiler));
  if (!interpreter)
    throw std::runtime_error("sinter-kernel: cannot start clang's interpreter: " +
                             error_text(interpreter.takeError()));
  state_->interpreter = std::move(*interpreter);
  // Diagnostics go to a string per cell (they are the error reply), not to stderr.
  clang::CompilerInstance& ci = *state_->interpreter->getCompilerInstance();
  state_->printer = std::make_unique<clang::TextDiagnosticPrinter>(state_->diagnostics_stream,
                                                                   &ci.getDiagnosticOpts());
  state_->printer->BeginSourceFile(ci.getLangOpts(), &ci.getPreprocessor());
  ci.getDiagnostics().setClient(state_->printer.get(), /*ShouldOwnClient=*/false);
  if (llvm::Error e = state_->interpreter->LoadDynamicLibrary(options.library.c_str()))
    throw std::runtime_error("sinter-kernel: cannot load " + options.library + ": " +
                             error_text(std::move(e)));
  CellResult prelude =
      run_part("#include \"dsl/sinter.hpp\"\n#include \"jit/notebook/display.hpp\"\n"
               "#include <iostream>\nusing namespace sinter;\nusing sinter::notebook::display;");
  if (!prelude.ok)
    throw std::runtime_error("sinter-kernel: cannot include dsl/sinter.hpp from " +
                             options.source_root + ": " + prelude.message);
}

CellInterpreter::~CellInterpreter() = default;

CellResult CellInterpreter::run(std::string_view code) {
  std::size_t tail = trailing_expression(code);
  if (tail == std::string_view::npos) return run_part(code);
  // The trailing expression is shown through show_result (jit/notebook/display.hpp): clang's own
  // value printing fails to link expressions that make temporaries in clang 19.
  if (tail > 0)
    if (CellResult before = run_part(code.substr(0, tail)); !before.ok) return before;
  std::string expression(code.substr(tail));
  CellResult shown = run_part("sinter::notebook::show_result((" + expression + "\n));");
  // Not an expression after all (a declaration missing its `;`, say): clang's own words on it.
  if (!shown.ok && shown.error_name == "compile error") return run_part(expression);
  return shown;
}

CellResult CellInterpreter::run_part(std::string_view code) {
  CellResult result;
  state_->diagnostics.clear();
  try {
    if (llvm::Error e =
            state_->interpreter->ParseAndExecute(llvm::StringRef(code.data(), code.size()))) {
      std::string why = error_text(std::move(e));
      state_->diagnostics_stream.flush();
      result.ok = false;
      result.error_name = "compile error";
      if (state_->diagnostics.empty()) {
        // Parsed but not linked (a symbol nothing defines): drop the cell's code, or every
        // later cell would fail on it too.
        result.message = why;
        llvm::consumeError(state_->interpreter->Undo());
      } else {
        result.message = state_->diagnostics;
      }
      return result;
    }
  } catch (const std::exception& e) {

    result.ok = false;
    result.error_name = exception_type_name();
    result.message = e.what();
    return result;
  } catch (...) {
    result.ok = false;
    result.error_name = exception_type_name();
    result.message = "a C++ exception that is not a std::exception";
    return result;
  }
  state_->diagnostics_stream.flush();
  return result;
}

} // namespace sinter::notebook
