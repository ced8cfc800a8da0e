// jit/notebook/cell_interpreter.cpp — clang::Interpreter set up for sinter cells: diagnostics
// captured per cell, exceptions caught, trailing values shown
#include "jit/notebook/cell_interpreter.hpp"
#include "jit/notebook/cell_source.hpp"
#include "jit/notebook/redefinition.hpp"

#include <clang/AST/ASTContext.h>
#include <clang/AST/Decl.h>
#include <clang/AST/DeclCXX.h>
#include <clang/AST/PrettyPrinter.h>
#include <clang/AST/RawCommentList.h>
#include <clang/Basic/DiagnosticOptions.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <clang/Interpreter/CodeCompletion.h>
#include <clang/Interpreter/Interpreter.h>
#include <clang/Sema/Lookup.h>
#include <clang/Sema/Sema.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
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
  unsigned cells = 0;             // run so far: names each cell's namespace
  std::vector<std::string> flags; // the compiler's, for the completion's own compiler
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
  // SINTER_KERNEL_TIMING=1: the start-up's phases on stderr (the kernel's log).
  auto started = std::chrono::steady_clock::now();
  auto phase = [&, timing = std::getenv("SINTER_KERNEL_TIMING") != nullptr](const char* what) {
    if (timing)
      std::fprintf(
          stderr, "sinter-kernel: %s after %.3f s\n", what,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  };
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  // -O0: at -O1 an inline function emitted for one cell is dropped from its module, and a later
  // cell that needs it fails to link (clang-repl keeps no copy). Cells are glue: the work runs
  // in libsinter and its JIT-compiled kernels.
  std::vector<std::string> flags{"-std=c++20", "-O0", "-fexceptions", "-I" + options.source_root};
  flags.insert(flags.end(), options.flags.begin(), options.flags.end());
  state_->flags = flags;
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
  phase("clang's interpreter created");
  // Diagnostics go to a string per cell (they are the error reply), not to stderr.
  clang::CompilerInstance& ci = *state_->interpreter->getCompilerInstance();
  state_->printer =
      std::make_unique<CellDiagnostics>(state_->diagnostics_stream, &ci.getDiagnosticOpts());
  state_->printer->BeginSourceFile(ci.getLangOpts(), &ci.getPreprocessor());
  ci.getDiagnostics().setClient(state_->printer.get(), /*ShouldOwnClient=*/false);
  if (llvm::Error e = state_->interpreter->LoadDynamicLibrary(options.library.c_str()))
    throw std::runtime_error("sinter-kernel: cannot load " + options.library + ": " +
                             error_text(std::move(e)));
  phase("libsinter loaded");
  CellResult prelude =
      run_part("#include \"dsl/sinter.hpp\"\n#include \"jit/notebook/display.hpp\"\n"
               "#include <iostream>\n#include <thread>\nusing namespace sinter;\n"
               "using namespace sinter::notebook;");
  if (!prelude.ok)
    throw std::runtime_error("sinter-kernel: cannot include dsl/sinter.hpp from " +
                             options.source_root + ": " + prelude.message);
  phase("dsl/sinter.hpp included: ready for the first cell");
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

namespace {

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// Where the name (with its `a::b::` qualifiers) that ends at `end` starts.
std::size_t qualified_name_start(std::string_view code, std::size_t end) {
  std::size_t begin = end;
  for (;;) {
    while (begin > 0 && is_name_char(code[begin - 1]))
      --begin;
    if (begin >= 2 && code.substr(begin - 2, 2) == "::") {
      begin -= 2;
      continue;
    }
    return begin;
  }
}

std::vector<std::string_view> split_qualified(std::string_view name) {
  if (name.starts_with("::")) name.remove_prefix(2);
  std::vector<std::string_view> parts;
  for (std::size_t at = 0;;) {
    std::size_t next = name.find("::", at);
    parts.push_back(name.substr(at, next == std::string_view::npos ? name.size() - at : next - at));
    if (next == std::string_view::npos) return parts;
    at = next + 2;
  }
}

/// The namespace, class or enum a declaration opens, if it is one.
clang::DeclContext* scope_of(clang::NamedDecl* decl) {
  decl = decl->getUnderlyingDecl();
  if (auto* alias = llvm::dyn_cast<clang::NamespaceAliasDecl>(decl)) return alias->getNamespace();
  if (auto* type = llvm::dyn_cast<clang::TypedefNameDecl>(decl))
    if (clang::TagDecl* tag = type->getUnderlyingType()->getAsTagDecl()) return tag;
  if (auto* record = llvm::dyn_cast<clang::CXXRecordDecl>(decl))
    return record->hasDefinition() ? record->getDefinition() : nullptr;
  return llvm::dyn_cast<clang::DeclContext>(decl);
}

/// What `a::b::c` names, looked up as a cell would from the top level (through `using
/// namespace` and the cells' inline namespaces).
std::vector<clang::NamedDecl*> look_up(clang::CompilerInstance& compiler,
                                       const std::vector<std::string_view>& parts) {
  clang::Sema& sema = compiler.getSema();
  clang::ASTContext& context = compiler.getASTContext();
  auto in = [&](clang::DeclContext* scope, std::string_view part) {
    clang::LookupResult result(
        sema,
        clang::DeclarationName(&context.Idents.get(llvm::StringRef(part.data(), part.size()))),
        clang::SourceLocation(), clang::Sema::LookupOrdinaryName);
    result.suppressDiagnostics();
    if (scope)
      sema.LookupQualifiedName(result, scope);
    else
      sema.LookupName(result, sema.TUScope);
    return std::vector<clang::NamedDecl*>(result.begin(), result.end());
  };
  std::vector<clang::NamedDecl*> found;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty()) return {};
    clang::DeclContext* scope = nullptr;
    if (i > 0) {
      if (found.empty()) return {};
      scope = scope_of(found.front());
      if (!scope) return {};
    }
    found = in(scope, parts[i]);
  }
  return found;
}

/// Collects the names (identifiers only: no operators, constructors or the kernel's `__`
/// names) that start with what was typed.
class NameCollector final : public clang::VisibleDeclConsumer {
public:
  NameCollector(std::string_view typed, std::vector<std::string>& names)
      : typed_(typed), names_(names) {}
  void FoundDecl(clang::NamedDecl* decl, clang::NamedDecl*, clang::DeclContext*, bool) override {
    if (!decl->getDeclName().isIdentifier()) return;
    llvm::StringRef name = decl->getName();
    if (name.starts_with("__") || !name.starts_with(llvm::StringRef(typed_.data(), typed_.size())))
      return;
    names_.push_back(name.str());
  }

private:
  std::string_view typed_;
  std::vector<std::string>& names_;
};

} // namespace

CellInterpreter::Completion CellInterpreter::complete(std::string_view code, std::size_t cursor) {
  cursor = std::min(cursor, code.size());
  Completion out;
  out.start = cursor;
  while (out.start > 0 && is_name_char(code[out.start - 1]))
    --out.start;
  std::string_view typed = code.substr(out.start, cursor - out.start);
  clang::CompilerInstance& compiler = *state_->interpreter->getCompilerInstance();
  clang::Sema& sema = compiler.getSema();
  NameCollector collect(typed, out.matches);
  std::size_t at = out.start;
  if (at >= 2 && code.substr(at - 2, 2) == "::") {
    // `data::Data|`: the members of what the qualifier names.
    std::size_t begin = qualified_name_start(code, at - 2);
    std::vector<clang::NamedDecl*> found =
        look_up(compiler, split_qualified(code.substr(begin, at - 2 - begin)));
    if (!found.empty())
      if (clang::DeclContext* scope = scope_of(found.front()))
        sema.LookupVisibleDecls(scope, clang::Sema::LookupOrdinaryName, collect,
                                /*IncludeGlobalScope=*/false);
  } else if ((at >= 1 && code[at - 1] == '.') || (at >= 2 && code.substr(at - 2, 2) == "->")) {
    // `model.|`, `ptr->|` after a variable's name: the members of its class.
    std::size_t name_end = code[at - 1] == '.' ? at - 1 : at - 2;
    std::size_t begin = qualified_name_start(code, name_end);
    std::vector<clang::NamedDecl*> found =
        look_up(compiler, split_qualified(code.substr(begin, name_end - begin)));
    if (!found.empty())
      if (auto* variable = llvm::dyn_cast<clang::ValueDecl>(found.front()->getUnderlyingDecl())) {
        clang::QualType type = variable->getType().getNonReferenceType();
        if (code[at - 1] == '>' && type->isPointerType()) type = type->getPointeeType();
        if (clang::CXXRecordDecl* record = type->getAsCXXRecordDecl();
            record && record->hasDefinition())
          sema.LookupVisibleDecls(record->getDefinition(), clang::Sema::LookupMemberName, collect,
                                  /*IncludeGlobalScope=*/false);
      }
  } else {
    // Everything visible at the top level, and clang-repl's completion of the line typed so
    // far (keywords, builtin types).
    sema.LookupVisibleDecls(sema.TUScope, clang::Sema::LookupOrdinaryName, collect);
    std::vector<const char*> args;
    for (const std::string& f : state_->flags)
      args.push_back(f.c_str());
    clang::IncrementalCompilerBuilder builder;
    builder.SetCompilerArgs(args);
    if (auto completer_compiler = builder.CreateCpp()) {
      if (auto completer = clang::Interpreter::create(std::move(*completer_compiler))) {
        std::size_t line_begin = code.rfind('\n', cursor == 0 ? 0 : cursor - 1);
        line_begin = line_begin == std::string_view::npos || cursor == 0 ? 0 : line_begin + 1;
        std::string_view line = code.substr(line_begin, cursor - line_begin);
        clang::ReplCodeCompleter completion;
        std::vector<std::string> results;
        completion.codeComplete((*completer)->getCompilerInstance(),
                                llvm::StringRef(line.data(), line.size()),
                                /*Line=*/1, static_cast<unsigned>(line.size()) + 1,
                                state_->interpreter->getCompilerInstance(), results);
        for (std::string& r : results)
          if (std::string_view(r).starts_with(typed) && !r.starts_with("__"))
            out.matches.push_back(std::move(r));
      } else {
        llvm::consumeError(completer.takeError());
      }
    } else {
      llvm::consumeError(completer_compiler.takeError());
    }
  }
  std::sort(out.matches.begin(), out.matches.end());
  out.matches.erase(std::unique(out.matches.begin(), out.matches.end()), out.matches.end());
  return out;
}

std::string CellInterpreter::inspect(std::string_view code, std::size_t cursor) {
  cursor = std::min(cursor, code.size());
  std::size_t end = cursor;
  while (end < code.size() && is_name_char(code[end]))
    ++end;
  std::size_t begin = qualified_name_start(code, end);
  std::string_view name = code.substr(begin, end - begin);
  if (name.empty() || !is_name_char(name.back())) return {};
  clang::CompilerInstance& compiler = *state_->interpreter->getCompilerInstance();
  clang::ASTContext& context = compiler.getASTContext();
  std::vector<clang::NamedDecl*> found = look_up(compiler, split_qualified(name));
  clang::PrintingPolicy policy = context.getPrintingPolicy();
  policy.TerseOutput = true;            // declarations, not bodies
  policy.SuppressUnwrittenScope = true; // not the cells' inline namespaces
  std::string text;
  llvm::raw_string_ostream out(text);
  for (clang::NamedDecl* decl : found) {
    decl = decl->getUnderlyingDecl();
    if (!text.empty()) out << "\n\n";
    if (auto* variable = llvm::dyn_cast<clang::VarDecl>(decl)) {
      variable->getType().print(out, policy);
      out << " " << variable->getName();
    } else {
      decl->print(out, policy);
    }
    if (const clang::RawComment* comment = context.getRawCommentForAnyRedecl(decl))
      out << "\n"
          << comment->getFormattedText(context.getSourceManager(), context.getDiagnostics());
  }
  out.flush();
  return text;
}

} // namespace sinter::notebook
