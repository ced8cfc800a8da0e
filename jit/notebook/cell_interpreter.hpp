// jit/notebook/cell_interpreter.hpp — runs notebook cells of C++ through clang's incremental
// interpreter (clang-repl), with sinter's DSL loaded before the first cell
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sinter::notebook {

/// The outcome of one cell.
struct CellResult {
  bool ok = true;
  /// Failed: `compile error` (clang's diagnostics in `message`) or the C++ exception's type
  /// name (`std::runtime_error`, `sinter::ShapeError`, …) with its what().
  std::string error_name, message;
};

struct CellInterpreterOptions {
  /// Where sinter's headers are (the folder holding dsl/) and its library.
  std::string source_root, library;
  /// Further compiler flags (-I, -D, …).
  std::vector<std::string> flags;
  /// The precompiled prelude (jit/notebook/prelude.hpp) that write_prelude() wrote:
  /// `<prelude>.pch` and `<prelude>.o`. Empty, missing or out of date: the prelude is parsed
  /// instead, which takes about 3 s.
  std::string prelude;
};

/// Precompiles jit/notebook/prelude.hpp for sessions with `options`: writes `<prelude>.pch` (the
/// parsed header) and `<prelude>.o` (the code of its inline functions and template
/// instantiations), and, unless `depfile` is empty, the headers it read as a Makefile rule.
/// Throws std::runtime_error, with clang's diagnostics on stderr, when the header does not
/// compile.
void write_prelude(const CellInterpreterOptions& options, const std::string& prelude,
                   const std::string& depfile);

/// One clang::Interpreter for a session. Cells run one at a time, each on the thread that
/// calls run(). The constructor loads libsinter and includes "dsl/sinter.hpp" with
/// `using namespace sinter;`, so the first cell starts with the DSL ready.
class CellInterpreter {
public:
  explicit CellInterpreter(const CellInterpreterOptions& options);
  ~CellInterpreter();
  CellInterpreter(const CellInterpreter&) = delete;
  CellInterpreter& operator=(const CellInterpreter&) = delete;

  /// Runs a cell. A trailing expression (one without a closing `;`) is passed to
  /// sinter::notebook::show_result, which hands it to the kernel to show.
  CellResult run(std::string_view code);

  /// What may complete the name being typed at byte `cursor` of `code`: clang's code
  /// completion in the context of everything the session defined, plus `code` itself.
  struct Completion {
    std::vector<std::string> matches; ///< sorted, no duplicates
    std::size_t start = 0;            ///< byte offset where the completed name begins
  };
  Completion complete(std::string_view code, std::size_t cursor);

  /// What the session knows of the (possibly qualified) name at byte `cursor` of `code`:
  /// each declaration of it, as clang prints it, with its documentation comment. Empty when
  /// there is no name there or nothing declares it.
  std::string inspect(std::string_view code, std::size_t cursor);

private:
  void start(const CellInterpreterOptions& options, bool precompiled);
  CellResult run_part(std::string_view code);
  CellResult run_once(std::string_view code);
  struct State;
  std::unique_ptr<State> state_;
};

} // namespace sinter::notebook
