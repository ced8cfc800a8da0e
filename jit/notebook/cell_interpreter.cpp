// jit/notebook/cell_interpreter.cpp — clang::Interpreter set up for sinter cells: diagnostics
// captured per cell, exceptions caught, trailing values shown
#include "jit/notebook/cell_interpreter.hpp"
#include "jit/notebook/cell_source.hpp"
#include "jit/notebook/redefinition.hpp"
#include "jit/settings.hpp"

#include <clang/AST/ASTContext.h>
#include <clang/AST/Decl.h>
#include <clang/AST/DeclCXX.h>
#include <clang/AST/ExternalASTSource.h>
#include <clang/AST/PrettyPrinter.h>
#include <clang/AST/RawCommentList.h>
#include <clang/Basic/DiagnosticOptions.h>
#include <clang/CodeGen/CodeGenAction.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendActions.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <clang/Interpreter/Interpreter.h>
#include <clang/Lex/Preprocessor.h>
#include <clang/Sema/Lookup.h>
#include <clang/Sema/Sema.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/FileSystem.h>
#include <llvm/Support/MemoryBuffer.h>
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

/// Hands each declaration clang reads from the precompiled prelude, as a cell first uses it, to
/// the code generator. clang 19 drops them (its BackendConsumer ignores the "interesting"
/// declarations a precompiled header yields once it has finished its first module), and then a
/// cell cannot emit what it uses of the header's non-exported code: `static` and
/// `always_inline` functions, hana's `constexpr` function objects.
class PreludeDeclarationsToCodegen final : public clang::ASTConsumer {
public:
  explicit PreludeDeclarationsToCodegen(clang::ASTConsumer& codegen) : codegen_(codegen) {}
  void HandleInterestingDecl(clang::DeclGroupRef group) override {
    codegen_.HandleTopLevelDecl(group);
  }
  void HandleVTable(clang::CXXRecordDecl* record) override { codegen_.HandleVTable(record); }

private:
  clang::ASTConsumer& codegen_;
};

} // namespace

struct CellInterpreter::State {
  // Outlives the interpreter, whose precompiled header's reader points to it.
  std::unique_ptr<PreludeDeclarationsToCodegen> prelude_to_codegen;
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

namespace {

std::vector<std::string> compiler_flags(const CellInterpreterOptions& options) {
  // -O0: at -O1 an inline function emitted for one cell is dropped from its module, and a later
  // cell that needs it fails to link (clang-repl keeps no copy). Cells are glue: the work runs
  // in libsinter and its JIT-compiled kernels.
  std::vector<std::string> flags{"-std=c++20", "-O0", "-fexceptions", "-I" + options.source_root};
  flags.insert(flags.end(), options.flags.begin(), options.flags.end());
  return flags;
}

/// A compiler set up exactly as clang::Interpreter sets up its own (driver, target,
/// -fincremental-extensions), so that what it writes loads into the interpreter.
std::unique_ptr<clang::CompilerInstance>
interpreter_like_compiler(const std::vector<std::string>& flags) {
  std::vector<const char*> args;
  for (const std::string& f : flags)
    args.push_back(f.c_str());
  clang::IncrementalCompilerBuilder builder;
  builder.SetCompilerArgs(args);
  auto compiler = builder.CreateCpp();
  if (!compiler)
    throw std::runtime_error("sinter-kernel: cannot set up clang: " +
                             error_text(compiler.takeError()));
  return std::move(*compiler);
}

/// `text` cut to `limit` bytes, for a log line (a link error can list thousands of symbols).
std::string shortened(std::string text, std::size_t limit) {
  if (text.size() > limit) text = text.substr(0, limit) + "…";
  return text;
}

void initialize_native_target() {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
}

/// What is wrong with the precompiled header that `flags` include (not one, from another clang,
/// a header changed since), as clang says it; empty when it loads.
std::string precompiled_header_problem(const std::vector<std::string>& flags) {
  std::unique_ptr<clang::CompilerInstance> compiler = interpreter_like_compiler(flags);
  std::string said;
  llvm::raw_string_ostream said_stream(said);
  clang::TextDiagnosticPrinter printer(said_stream, &compiler->getDiagnosticOpts());
  compiler->getDiagnostics().setClient(&printer, /*ShouldOwnClient=*/false);
  auto nothing = llvm::MemoryBuffer::getMemBuffer("", "<check the precompiled prelude>");
  compiler->getFrontendOpts().Inputs = {
      clang::FrontendInputFile(nothing->getMemBufferRef(), clang::InputKind(clang::Language::CXX))};
  compiler->setVerboseOutputStream(std::make_unique<llvm::raw_null_ostream>());
  clang::SyntaxOnlyAction load;
  bool loaded = compiler->ExecuteAction(load) && !compiler->getDiagnostics().hasErrorOccurred();
  said_stream.flush();
  if (loaded) return {};
  while (!said.empty() && said.back() == '\n')
    said.pop_back();
  return said.empty() ? "clang cannot read it" : shortened(said, 600);
}

std::string pch_path(const std::string& prelude) { return prelude + ".pch"; }
std::string object_path(const std::string& prelude) { return prelude + ".o"; }

/// The global symbols an object file defines and those it needs from elsewhere.
struct ObjectSymbols {
  std::vector<std::string> defined, undefined;
};

ObjectSymbols object_symbols(const llvm::MemoryBuffer& object) {
  ObjectSymbols symbols;
  auto file = llvm::object::ObjectFile::createObjectFile(object.getMemBufferRef());
  if (!file) return (llvm::consumeError(file.takeError()), symbols);
  for (const llvm::object::SymbolRef& symbol : (*file)->symbols()) {
    auto flags = symbol.getFlags();
    auto name = symbol.getName();
    if (!flags || !name) {
      if (!flags) llvm::consumeError(flags.takeError());
      if (!name) llvm::consumeError(name.takeError());
      continue;
    }
    if (!(*flags & llvm::object::SymbolRef::SF_Global) || name->empty()) continue;
    (*flags & llvm::object::SymbolRef::SF_Undefined ? symbols.undefined : symbols.defined)
        .push_back(name->str());
  }
  return symbols;
}

/// Stands in for a function the precompiled prelude's code calls but no library exports: one
/// of libstdc++'s internals, which only code the library itself runs calls (std::filesystem's
/// `path(string_view, _Type)`). A parsed prelude emits no code for it; the precompiled one emits
/// every inline function, so its code names it.
[[noreturn]] void call_to_missing_function() {
  std::fputs("sinter-kernel: a cell called a function that no loaded library exports (a "
             "library's internal function)\n",
             stderr);
  std::abort();
}

/// Links the precompiled prelude's code into the session.
void link_prelude_object(clang::Interpreter& interpreter, const std::string& path) {
  auto jit = interpreter.getExecutionEngine();
  if (!jit) throw std::runtime_error(error_text(jit.takeError()));
  auto object = llvm::MemoryBuffer::getFile(path);
  if (!object) throw std::runtime_error("cannot read " + path + ": " + object.getError().message());
  ObjectSymbols symbols = object_symbols(**object);
  if (symbols.defined.empty()) throw std::runtime_error(path + " is not an object file");
  llvm::orc::SymbolMap missing;
  for (const std::string& name : symbols.undefined)
    if (name != "__dso_handle" && // the JIT defines it
        llvm::sys::DynamicLibrary::SearchForAddressOfSymbol(name.c_str()) == nullptr)
      missing[jit->getExecutionSession().intern(name)] = {
          llvm::orc::ExecutorAddr::fromPtr(&call_to_missing_function),
          llvm::JITSymbolFlags::Exported};
  if (!missing.empty())
    if (llvm::Error e =
            jit->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(missing))))
      throw std::runtime_error(error_text(std::move(e)));
  if (llvm::Error e = jit->addObjectFile(std::move(*object)))
    throw std::runtime_error(error_text(std::move(e)));
  // Link it now (one symbol pulls in the whole object), so that a problem shows here.
  if (auto linked = jit->lookupLinkerMangled(symbols.defined.front()); !linked)
    throw std::runtime_error("its code does not link: " +
                             shortened(error_text(linked.takeError()), 400));
}

} // namespace

CellInterpreter::CellInterpreter(const CellInterpreterOptions& options) {
  bool precompiled = !options.prelude.empty() && llvm::sys::fs::exists(pch_path(options.prelude)) &&
                     llvm::sys::fs::exists(object_path(options.prelude));
  if (precompiled) {
    try {
      start(options, /*precompiled=*/true);
      return;
    } catch (const std::exception& e) {
      // Stale (a header changed since the build) or from another clang: parse it instead.
      std::fprintf(stderr,
                   "sinter-kernel: not using the precompiled prelude %s.pch (%s); parsing "
                   "dsl/sinter.hpp instead, which takes about 3 s (`ninja -C build` writes the "
                   "prelude again)\n",
                   options.prelude.c_str(), e.what());
    }
  }
  start(options, /*precompiled=*/false);
}

void CellInterpreter::start(const CellInterpreterOptions& options, bool precompiled) {
  state_ = std::make_unique<State>();
  // SINTER_KERNEL_TIMING=1: the start-up's phases on stderr (the kernel's log).
  auto started = std::chrono::steady_clock::now();
  auto phase = [&, timing = setting("SINTER_KERNEL_TIMING") != nullptr](const char* what) {
    if (timing)
      std::fprintf(
          stderr, "sinter-kernel: %s after %.3f s\n", what,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  };
  initialize_native_target();
  state_->flags = compiler_flags(options);
  std::vector<std::string> flags = state_->flags;
  if (precompiled) {
    flags.insert(flags.end(), {"-include-pch", pch_path(options.prelude)});
    // clang 19's interpreter crashes on a precompiled header it cannot read: try it first.
    if (std::string why = precompiled_header_problem(flags); !why.empty())
      throw std::runtime_error(why);
  }
  // clang's own diagnostics while it starts (a stale precompiled header, say) are the error.
  auto interpreter = clang::Interpreter::create(interpreter_like_compiler(flags));
  if (!interpreter)
    throw std::runtime_error("sinter-kernel: cannot start clang's interpreter: " +
                             error_text(interpreter.takeError()));
  state_->interpreter = std::move(*interpreter);
  if (precompiled) {
    clang::CompilerInstance& compiler = *state_->interpreter->getCompilerInstance();
    state_->prelude_to_codegen =
        std::make_unique<PreludeDeclarationsToCodegen>(compiler.getASTConsumer());
    if (clang::ExternalASTSource* header = compiler.getASTContext().getExternalSource())
      header->StartTranslationUnit(state_->prelude_to_codegen.get());
  }
  phase(precompiled ? "clang's interpreter created, the precompiled prelude read"
                    : "clang's interpreter created");
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
  if (precompiled) {
    // The prelude's inline functions and template instantiations were compiled with the
    // header: clang's interpreter emits no code for what a precompiled header instantiated.
    link_prelude_object(*state_->interpreter, object_path(options.prelude));
    phase("the prelude's code linked: ready for the first cell");
    return;
  }
  CellResult prelude = run_part("#include \"jit/notebook/prelude.hpp\"");
  if (!prelude.ok)
    throw std::runtime_error("sinter-kernel: cannot include dsl/sinter.hpp from " +
                             options.source_root + ": " + prelude.message);
  phase("dsl/sinter.hpp included: ready for the first cell");
}

void write_prelude(const CellInterpreterOptions& options, const std::string& prelude,
                   const std::string& depfile) {
  initialize_native_target();
  std::vector<std::string> flags = compiler_flags(options);
  std::string header = options.source_root + "/jit/notebook/prelude.hpp";
  auto compiler_for = [&](clang::InputKind kind, const std::string& input,
                          const std::string& output) {
    std::unique_ptr<clang::CompilerInstance> compiler = interpreter_like_compiler(flags);
    compiler->getFrontendOpts().Inputs = {clang::FrontendInputFile(input, kind)};
    compiler->getFrontendOpts().OutputFile = output;
    return compiler;
  };
  auto execute = [](clang::CompilerInstance& compiler, clang::FrontendAction&& action) {
    if (!compiler.ExecuteAction(action) || compiler.getDiagnostics().hasErrorOccurred())
      throw std::runtime_error("sinter-kernel: cannot write " +
                               compiler.getFrontendOpts().OutputFile);
  };
  // Written under temporary names and renamed into place, so that a session never reads half a
  // prelude.
  std::string pch_temporary = pch_path(prelude) + ".partial";
  std::string object_temporary = object_path(prelude) + ".partial";
  auto pch =
      compiler_for(clang::InputKind(clang::Language::CXX).getHeader(), header, pch_temporary);
  // Every inline function and instantiation the header makes is compiled once, into the object;
  // sessions link to it instead of emitting their own (they cannot: see start()).
  pch->getLangOpts().ModulesCodegen = true;
  pch->getLangOpts().PCHInstantiateTemplates = true;
  if (!depfile.empty()) {
    pch->getDependencyOutputOpts().OutputFile = depfile;
    pch->getDependencyOutputOpts().Targets = {pch_path(prelude)};
  }
  execute(*pch, clang::GeneratePCHAction());
  execute(*compiler_for(clang::InputKind(clang::Language::CXX, clang::InputKind::Precompiled),
                        pch_temporary, object_temporary),
          clang::EmitObjAction());
  if (std::error_code e = llvm::sys::fs::rename(pch_temporary, pch_path(prelude)))
    throw std::runtime_error("sinter-kernel: cannot write " + pch_path(prelude) + ": " +
                             e.message());
  if (std::error_code e = llvm::sys::fs::rename(object_temporary, object_path(prelude)))
    throw std::runtime_error("sinter-kernel: cannot write " + object_path(prelude) + ": " +
                             e.message());
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

/// Looking names up reads declarations from the precompiled prelude; should that report an
/// error, it belongs to no cell, and left standing it would fail the next one ("Parsing
/// failed").
void forget_lookup_errors(clang::CompilerInstance& compiler) {
  if (compiler.getDiagnostics().hasErrorOccurred()) compiler.getDiagnostics().Reset(/*soft=*/true);
}

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
    // Everything visible at the top level, and the language's keywords (builtin types among
    // them).
    sema.LookupVisibleDecls(sema.TUScope, clang::Sema::LookupOrdinaryName, collect);
    const clang::LangOptions& language = compiler.getLangOpts();
    for (const auto& entry : compiler.getPreprocessor().getIdentifierTable()) {
      llvm::StringRef word = entry.getKey();
      if (entry.getValue()->isKeyword(language) && !word.starts_with("_") &&
          word.starts_with(llvm::StringRef(typed.data(), typed.size())))
        out.matches.push_back(word.str());
    }
  }
  std::sort(out.matches.begin(), out.matches.end());
  out.matches.erase(std::unique(out.matches.begin(), out.matches.end()), out.matches.end());
  forget_lookup_errors(compiler);
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
  forget_lookup_errors(compiler);
  return text;
}

} // namespace sinter::notebook
