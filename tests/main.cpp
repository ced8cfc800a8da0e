// tests/main.cpp — the Catch2 entry point: runs the suite strictly (no empty runs, no test case
// without an assertion), and skips GPU suites only where nothing can run them
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "jit/backend/cuda/cuda_driver.hpp"
#include "ptx_check.hpp"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace {

constexpr int meson_skip = 77;

bool selects(int argc, char** argv, std::string_view tag_prefix) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).find(tag_prefix) != std::string_view::npos) return true;
  return false;
}

bool required(const char* variable) {
  const char* value = std::getenv(variable);
  return value && std::string_view(value) == "1";
}

/// Why a run selecting `tag_prefix` cannot run here: a skip (77) when the machine lacks the
/// hardware or tool and `require_variable` is not 1, else a failure (1). Prints the reason.
int cannot_run(const char* tag_prefix, const std::string& reason, bool absent,
               const char* require_variable) {
  if (absent && !required(require_variable)) {
    std::printf("skipped %s tests: %s (set %s=1 to make this a failure)\n", tag_prefix,
                reason.c_str(), require_variable);
    return meson_skip;
  }
  std::printf("FAILED: %s tests cannot run: %s%s%s%s\n", tag_prefix, reason.c_str(),
              absent ? ", and " : "", absent ? require_variable : "",
              absent ? "=1 asks for them" : "");
  return 1;
}

} // namespace

// Run only by tests/cli/check_strict_runner.sh (hidden tag): it must fail, since it asserts
// nothing.
TEST_CASE("probe: a test case without assertions", "[.][no-assertions-probe]") {}

int main(int argc, char** argv) {
  // Listing needs no hardware (tests/cli/check_every_case_runs.py lists every tag's cases).
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    listing |= std::string_view(argv[i]).starts_with("--list");
  if (listing) {
    Catch::Session session;
    if (int status = session.applyCommandLine(argc, argv); status != 0) return status;
    return session.run();
  }
  if (selects(argc, argv, "[cuda") && !sinter::cuda::driver())
    return cannot_run("[cuda]", "no usable NVIDIA GPU: " + sinter::cuda::unavailable_reason(),
                      sinter::cuda::no_gpu_present(), "SINTER_REQUIRE_GPU");
  if (selects(argc, argv, "[ptx") && !sinter::testing::find_ptxas())
    return cannot_run("[ptx]",
                      "ptxas not found (install the CUDA toolkit, or set SINTER_PTXAS or "
                      "CUDA_HOME)",
                      true, "SINTER_REQUIRE_PTXAS");

  Catch::Session session;
  if (int status = session.applyCommandLine(argc, argv); status != 0) return status;
  // A filter that matches nothing, or a test case that checks nothing, is a failure: a suite
  // that silently stopped testing must not look green.
  session.configData().warnings = static_cast<Catch::WarnAbout::What>(
      Catch::WarnAbout::NoAssertions | Catch::WarnAbout::NoTests);
  return session.run();
}
