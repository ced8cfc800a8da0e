// tests/test_pipeline.cpp — the compile's stages: listed in order, each dumped by name, timed,
// and the settings table against docs/compiling.md
#include "dsl/sinter.hpp"

#include "capture_stderr.hpp"
#include "env_override.hpp"
#include "jit/pipeline/stage.hpp"
#include "jit/settings.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

using namespace sinter;
using sinter::testing::capture_stderr;
using sinter::testing::EnvOverride;

namespace {

/// What the first call of a fresh GPT training step (bf16 autocast, clipping) prints on stderr
/// with SINTER_DUMP=`dump`.
std::string first_gpt_step(const std::string& dump) {
  EnvOverride setting("SINTER_DUMP", dump);
  Init init(5);
  GPT model(GPTConfig{.vocab = 32, .context = 8, .dim = 16, .depth = 1, .heads = 2}, init);
  auto step = compile_step(
      model, [](GPT& m, Var ids, Var next) { return cross_entropy_mean(m(ids), next); },
      adamw{.lr = 1e-3}, {.clip_grad_norm = 1.0, .amp = amp::bf16});
  std::vector<double> ids(2 * 8);
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<double>((i * 5) % 32);
  HostTensor x = HostTensor::from_doubles(DType::i64, {2, 8}, ids);
  return capture_stderr([&] { step(x, x); });
}

/// The stage names of the first `// sinter stages of <program>` list in `text`.
std::vector<std::string> listed_stages(const std::string& text, const std::string& program) {
  std::istringstream lines(text);
  std::vector<std::string> names;
  bool inside = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("// sinter stages of " + program + " on ")) {
      inside = true;
      continue;
    }
    if (!inside) continue;
    // `//   <name> <ms> ms  <what it made>`; read by hand (std::regex recurses once per
    // character, and a long line overflows the stack under AddressSanitizer).
    std::string_view rest = line;
    if (!rest.starts_with("//   ")) break;
    rest.remove_prefix(5);
    std::size_t end = rest.find_first_not_of("abcdefghijklmnopqrstuvwxyz-");
    if (end == 0 || end == std::string_view::npos || rest[end] != ' ') break;
    std::string name(rest.substr(0, end));
    rest.remove_prefix(end);
    rest.remove_prefix(rest.find_first_not_of(' '));
    std::size_t ms = rest.find(" ms  ");
    if (ms == std::string_view::npos || ms < 3 || rest[ms - 2] != '.' ||
        rest.substr(0, ms).find_first_not_of("0123456789.") != std::string_view::npos ||
        ms + 5 >= rest.size())
      break;
    names.push_back(name);
  }
  return names;
}

} // namespace

TEST_CASE("SINTER_DUMP=list prints the stages of a GPT training step with AMP, in order",
          "[pipeline]") {
  std::string text = first_gpt_step("list");
  INFO(text);
  std::vector<std::string> names = listed_stages(text, "train step");
  CHECK(names == std::vector<std::string>{"trace", "autocast", "working-copies", "autodiff",
                                          "merge-gradients", "update", "lower", "simplify", "cse",
                                          "small-matmuls", "fuse", "memory", "kernels"});
  for (std::size_t i = 1; i < names.size(); ++i)
    CHECK(stage_position(names[i - 1]) < stage_position(names[i]));
}

TEST_CASE("every stage of the list dumps what it made by its name", "[pipeline]") {
  std::vector<std::string> names = listed_stages(first_gpt_step("list"), "train step");
  REQUIRE(names.size() > 10);
  for (const std::string& name : names) {
    INFO("SINTER_DUMP=" << name);
    std::string text = first_gpt_step(name);
    std::string header = name == "fuse"      ? "// sinter fusion: "
                         : name == "memory"  ? "// sinter memory plan: "
                         : name == "kernels" ? "// sinter kernels: "
                                             : "// sinter IR after " + name + " (train step)\n";
    CHECK_THAT(text, Catch::Contains(header));
    // Only the stage named: no other stage's dump.
    for (const std::string& other : names)
      if (other != name) CHECK_THAT(text, !Catch::Contains("// sinter IR after " + other + " ("));
  }
  // The kernels dump names where each kernel came from.
  CHECK_THAT(
      first_gpt_step("kernels"),
      Catch::Matches(
          R"((.|\n)*kernel 0 [a-z_]+ -> %[0-9]+  (compiled|disk cache|memory|library)(.|\n)*)"));
}

TEST_CASE("SINTER_TIME_PHASES=1 prints every stage of a compile with its time", "[pipeline]") {
  EnvOverride timing("SINTER_TIME_PHASES", "1");
  std::string text = first_gpt_step("");
  for (const char* stage : {"trace", "autocast", "working-copies", "autodiff", "merge-gradients",
                            "update", "lower", "simplify", "cse", "fuse", "memory", "kernels"})
    CHECK_THAT(text, Catch::Matches(std::string(R"((.|\n)*sinter: phase )") + stage +
                                    R"( [0-9]+\.[0-9] ms\n(.|\n)*)"));
}

TEST_CASE("stages run only in the listed order", "[pipeline]") {
  CompileRun run("program", false, DumpSelection(""));
  Graph g;
  g.add_output("x", input(g, "x", {DType::f32, {2}}).id);
  g = run.run({"cse", [](Graph graph) { return graph; }}, std::move(g));
  CHECK_THROWS_WITH(run.run({"lower", [](Graph graph) { return graph; }}, std::move(g)),
                    Catch::Contains("'lower' runs after 'cse'"));
  CHECK_THROWS_WITH(stage_position("fusion"), Catch::Contains("not in jit/pipeline/stage.cpp"));
}

TEST_CASE("a misspelt SINTER_DUMP stage or SINTER_ variable gets a warning naming the closest",
          "[pipeline]") {
  const char* environment[] = {"SINTER_DUMPP=list", "SINTER_DEVICE=cpu", "HOME=/root",
                               "SINTER_ATENTION=fused", nullptr};
  std::string warning = unknown_settings_warning(const_cast<char**>(environment));
  CHECK_THAT(warning, Catch::Contains("SINTER_DUMPP is not a sinter setting (did you mean "
                                      "SINTER_DUMP?)"));
  CHECK_THAT(warning, Catch::Contains("SINTER_ATENTION is not a sinter setting (did you mean "
                                      "SINTER_ATTENTION?)"));
  CHECK_THAT(warning, !Catch::Contains("SINTER_DEVICE") && !Catch::Contains("HOME"));
}

TEST_CASE("docs/architecture.md and docs/compiling.md show the stage order as the code has it",
          "[pipeline]") {
  for (const char* page : {"/docs/architecture.md", "/docs/compiling.md"}) {
    std::ifstream doc(std::string(SINTER_SOURCE_DIR) + page);
    REQUIRE(doc);
    std::string text((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
    INFO(page);
    CHECK_THAT(text, Catch::Contains("```\n" + stage_table() + "```"));
  }
  CHECK(stage_order().size() <= 40); // the whole compile on one screen
}

TEST_CASE("docs/compiling.md's settings table is the code's table", "[pipeline]") {
  std::ifstream doc(std::string(SINTER_SOURCE_DIR) + "/docs/compiling.md");
  REQUIRE(doc);
  std::string text((std::istreambuf_iterator<char>(doc)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains(settings_markdown()));
  // Every listed variable once, and each in the docs.
  for (const SettingInfo& s : setting_table()) {
    INFO(s.name);
    CHECK(find_setting(s.name) == &s);
  }
}
