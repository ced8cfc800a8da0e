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

TEST_CASE("variable definitions take inline; functions with bodies do not", "[notebook]") {
  CHECK(takes_inline("auto step = compile_step(m, [](M& m) { return 1; }, sgd{});"));
  CHECK(takes_inline("Net net{Linear(8, 2, init)};"));
  CHECK(takes_inline("HostTensor t;"));
  CHECK(takes_inline("const double rate = 0.1;"));
  CHECK(takes_inline("Init init(1);"));
  CHECK(takes_inline("int later(int);")); // a declaration: inline changes nothing
  // However long it is.
  std::string long_step = "auto long_step = compile_step(net, [](Net& m, Var x, Var y) {";
  for (int i = 0; i < 20; ++i)
    long_step += " x = relu(x);";
  long_step += " return cross_entropy_mean(m(x), y); }, sgd{.lr = 0.1});";
  CHECK(takes_inline(long_step));
  CHECK_FALSE(takes_inline("int twice(int x) { return 2 * x; }"));
  CHECK_FALSE(takes_inline("struct Net { int a; };"));
  CHECK_FALSE(takes_inline("static int counter = 0;"));
  CHECK_FALSE(takes_inline("using Num = double;"));
  CHECK_FALSE(takes_inline("step(xs, ys);"));
}

TEST_CASE("a cell runs as pieces in order: declarations wrapped, statements after", "[notebook]") {
  std::vector<CellPart> parts = cell_parts("#include <cmath>\nInit init(1);\n"
                                           "int twice(int x) { return 2 * x; }\n"
                                           "twice(2);\nauto v = 1;\nstatic int n = 0;\nn += v;",
                                           7);
  REQUIRE(parts.size() == 4);
  CHECK(parts[0].code == "#line 1\n#include <cmath>");
  CHECK_FALSE(parts[0].declarations);
  // Declarations, then the statement after them.
  CHECK(parts[1].code == "inline namespace __sinter_cell_7 {\n#line 1\ninline\n#line 2\nInit "
                         "init(1);\nint twice(int x) { return 2 * x; }\n}\n#line 3\n\ntwice(2);");
  CHECK(parts[1].declarations);
  // A declaration after a statement starts a piece.
  CHECK(parts[2].code ==
        "inline namespace __sinter_cell_7 {\n#line 4\ninline\n#line 5\nauto v = 1;\n}\n");
  // Cannot take inline: a piece of its own, the statements after it with it.
  CHECK(parts[3].code == "inline namespace __sinter_cell_7 {\n#line 5\n\nstatic int n = "
                         "0;\n}\n#line 6\n\nn += v;");
  // A declaration after a statement on the same line keeps its column.
  parts = cell_parts("f(); int a = 1;", 2);
  REQUIRE(parts.size() == 2);
  CHECK(parts[1].code ==
        "inline namespace __sinter_cell_2 {\n#line 1\n    inline\n#line 1\n     int a = 1;\n}\n");
  CHECK(cell_parts("  \n// nothing\n", 1).empty());
  // Types and functions join the declarations around them; `struct … } s;` defines a variable.
  CHECK(cell_parts("struct A { int a; };\nauto x = 1;\nusing B = A;\nx++;", 1).size() == 1);
  CHECK(cell_parts("struct A { int a; } a;\nauto x = 1;", 1).size() == 2);
}
