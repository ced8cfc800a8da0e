// jit/notebook/cell_interpreter.cpp — clang::Interpreter set up for sinter cells: diagnostics
// captured per cell, exceptions caught, trailing values shown
#include "jit/notebook/cell_interpreter.hpp"
#include "jit/notebook/cell_source.hpp"
#include "jit/notebook/redefinition.hpp"

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

namespace {

/// clang's text diagnostics for the cell's error reply, and the names its errors say are
/// defined twice.
class CellDiagnostics final : public clang::DiagnosticConsumer {
public:
  CellDiagnostics(llvm::raw_ostream& out, clang::DiagnosticOptions* options)
      : printer_(out, options) {}
  void BeginSourceFile(const clang::LangOptions& language,
                       const clang::Preprocessor* preprocessor) override {
    printer_.BeginSourceFile(language, preprocessor);
  }
  void EndSourceFile() override { printer_.EndSourceFile(); }
  void HandleDiagnostic(clang::DiagnosticsEngine::Level level,
                        const clang::Diagnostic& info) override {
    clang::DiagnosticConsumer::HandleDiagnostic(level, info);
    if (std::string name = redefined_name(info); !name.empty()) redefined.push_back(name);
    printer_.HandleDiagnostic(level, info);
  }
  std::vector<std::string> redefined;

private:
  clang::TextDiagnosticPrinter printer_;
};

} // namespace

struct CellInterpreter::State {
  std::string diagnostics;
  llvm::raw_string_ostream diagnostics_stream{diagnostics};
  std::unique_ptr<CellDiagnostics> printer;
  std::unique_ptr<clang::Interpreter> interpreter;
  unsigned cells = 0; // run so far: names each cell's namespace
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
  enable_redefinition();
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
  state_->printer =
      std::make_unique<CellDiagnostics>(state_->diagnostics_stream, &ci.getDiagnosticOpts());
  state_->printer->BeginSourceFile(ci.getLangOpts(), &ci.getPreprocessor());
  ci.getDiagnostics().setClient(state_->printer.get(), /*ShouldOwnClient=*/false);
  if (llvm::Error e = state_->interpreter->LoadDynamicLibrary(options.library.c_str()))
    throw std::runtime_error("sinter-kernel: cannot load " + options.library + ": " +
                             error_text(std::move(e)));
  CellResult prelude =
      run_part("#include \"dsl/sinter.hpp\"\n#include \"jit/notebook/display.hpp\"\n"
               "#include <iostream>\n#include <thread>\nusing namespace sinter;\n"
               "using namespace sinter::notebook;");
  if (!prelude.ok)
    throw std::runtime_error("sinter-kernel: cannot include dsl/sinter.hpp from " +
                             options.source_root + ": " + prelude.message);
}

CellInterpreter::~CellInterpreter() = default;

CellResult CellInterpreter::run(std::string_view code) {
  unsigned cell = state_->cells++;
  std::size_t tail = trailing_expression(code);
  // Piece by piece, in order (cell_source.hpp says why); the first that fails ends the cell.
  for (const CellPart& part : cell_parts(code.substr(0, std::min(tail, code.size())), cell))
    if (CellResult result = run_part(part.code); !result.ok) return result;
  if (tail == std::string_view::npos) return {};
  // The trailing expression is shown through show_result (jit/notebook/display.hpp): clang's own
  // value printing fails to link expressions that make temporaries in clang 19.
  std::string expression = line_directive(code, tail) + std::string(code.substr(tail));
  CellResult shown = run_part("sinter::notebook::show_result((\n" + expression + "\n));");
  // Not an expression after all (a declaration missing its `;`, say): clang's own words on it.
  if (!shown.ok && shown.error_name == "compile error") return run_part(expression);
  return shown;
}

CellResult CellInterpreter::run_part(std::string_view code) {
  clang::CompilerInstance& compiler = *state_->interpreter->getCompilerInstance();
  begin_redefinitions();
  CellResult result = run_once(code);
  // An error that says an earlier cell's name is defined again (where hiding it as the cell
  // was parsed came too late): hide the earlier definitions, then once more.
  std::vector<std::string> redefined = std::exchange(state_->printer->redefined, {});
  if (!result.ok && !redefined.empty()) {
    bool hid = false;
    for (const std::string& name : redefined)
      hid |= hide_cell_declarations(compiler, name);
    if (hid) {
      state_->printer->clear();
      result = run_once(code);
    }
  }
  // A cell that did not compile or link leaves the earlier definitions as they were. (One
  // that threw has run: what it defined stays.)
  if (!result.ok && (result.error_name == "compile error" || result.error_name == "link error"))
    undo_redefinitions(compiler);
  return result;
}

CellResult CellInterpreter::run_once(std::string_view code) {
  CellResult result;
  state_->diagnostics.clear();
  state_->printer->redefined.clear();
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
        result.error_name = "link error";
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
