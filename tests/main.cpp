// tests/main.cpp — the Catch2 entry point: runs the suite, or skips GPU suites without a GPU
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "jit/runtime/cuda_driver.hpp"

#include <cstdio>
#include <string_view>

int main(int argc, char** argv) {
  // A run selecting [cuda...] tests on a machine without a usable GPU is a skip (meson: 77),
  // with the reason, not a pass.
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).find("[cuda") != std::string_view::npos &&
        !sinter::cuda::driver()) {
      std::printf("skipped %s: no usable NVIDIA GPU: %s\n", argv[i],
                  sinter::cuda::unavailable_reason().c_str());
      return 77;
    }
  return Catch::Session().run(argc, argv);
}
