// tests/test_cell_source.cpp — the notebook kernel's reading of cells: chunks, trailing
// expressions, which chunks are redefinable declarations, and the per-cell namespace wrapping
#include "jit/notebook/cell_source.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace sinter::notebook;

namespace {
std::string tail_of(std::string_view code) {
  std::size_t at = trailing_expression(code);
  return at == std::string_view::npos ? std::string("<none>") : std::string(code.substr(at));
}
} // namespace

TEST_CASE("a cell's trailing expression is what follows its last ; or block", "[notebook]") {
  CHECK(tail_of("int a = 1;\na + 1") == "\na + 1");
  CHECK(tail_of("40 + 2") == "40 + 2");
  CHECK(tail_of("int a = 1;") == "<none>");
  CHECK(tail_of("int a = 1; // done") == "<none>");
  CHECK(tail_of("int f() { return 1; }") == "<none>");
  CHECK(tail_of("#include <vector>\n") == "<none>");
  CHECK(tail_of("for (int i = 0; i < 3; ++i) { f(i); }\nx") == "\nx");
  // A brace that closes an initialiser does not end the statement.
  CHECK(tail_of("struct Q { int z = 9; };\nQ{}.z") == "\nQ{}.z");
  CHECK(tail_of("f(\"a;b\"); g('}')") == " g('}')");
  CHECK(tail_of("x /* ; */ + 1") == "x /* ; */ + 1");
  CHECK(tail_of("auto s = R\"(;})\";\ns") == "\ns");
}

TEST_CASE("declarations a later cell may redefine are told from statements", "[notebook]") {
  for (const char* declaration :
       {"int twice(int x) { return 2 * x; }", "struct Net { int a; };", "auto step = f(x);",
        "Net net{Linear(8, 2, init)};", "Init init(1);", "std::vector<int> v{1, 2};",
        "template <class T> T sq(T x) { return x * x; }", "using Num = double;",
        "enum class Color { red };", "const int k = 3;", "HostTensor t;",
        "Var loss(Net& m, Var x, Var y) { return m(x); }", "unsigned long n = 5;",
        "std::map<std::string, int> counts;", "Net operator+(Net a, Net b) { return a; }"}) {
    INFO(declaration);
    CHECK(is_redefinable_declaration(declaration));
  }
  for (const char* other :
       {"step(xs, ys);", "x = 3;", "for (int i = 0; i < 3; ++i) {}", "std::printf(\"hi\");",
        "using namespace std;", "using std::vector;", "namespace a { int b; }",
        "extern \"C\" int c();", "template <> struct std::hash<Net> {};", "++i;", "*p = 1;",
        "int Net::size() const { return 1; }", "Net::Net() {}", "Var Net::forward(Var x) {}",
        "a < b;", "return 1;", "obj.method();", "std::cout << x;", "#include <vector>"}) {
    INFO(other);
    CHECK_FALSE(is_redefinable_declaration(other));
  }
}

TEST_CASE("variable definitions are told from functions", "[notebook]") {
  CHECK(is_variable_definition("auto step = compile_step(m, [](M& m) { return 1; }, sgd{});"));
  CHECK(is_variable_definition("Net net{Linear(8, 2, init)};"));
  CHECK(is_variable_definition("HostTensor t;"));
  CHECK(is_variable_definition("const double rate = 0.1;"));
  CHECK_FALSE(is_variable_definition("int twice(int x) { return 2 * x; }"));
  CHECK_FALSE(is_variable_definition("Init init(1);")); // could declare a function
  CHECK_FALSE(is_variable_definition("struct Net { int a; };"));
  CHECK_FALSE(is_variable_definition("static int counter = 0;"));
  CHECK_FALSE(is_variable_definition("step(xs, ys);"));
}

TEST_CASE("declarations are wrapped in the cell's inline namespace, lines kept", "[notebook]") {
  std::string wrapped = wrap_declarations("#include <cmath>\nint twice(int x) { return 2 * x; }\n"
                                          "twice(2);\nauto v = 1;",
                                          7);
  CHECK(wrapped == "#include <cmath>\n"
                   "inline namespace __sinter_cell_7 {\n#line 1\n"
                   "\nint twice(int x) { return 2 * x; }"
                   "\n}\n#line 2\n"
                   "\ntwice(2);\n"
                   "inline namespace __sinter_cell_7 {\n#line 3\n"
                   "\ninline\n#line 4\nauto v = 1;"
                   "\n}\n");
  // A declaration after a statement on the same line keeps its column.
  CHECK(wrap_declarations("f(); int a = 1;", 2) ==
        "f();\ninline namespace __sinter_cell_2 {\n#line 1\n    \ninline\n#line 1\n     int a = "
        "1;\n}\n");
  // Statements alone: unchanged.
  CHECK(wrap_declarations("step(xs, ys);\nx = 3;", 1) == "step(xs, ys);\nx = 3;");
}
