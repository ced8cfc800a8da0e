// jit/cli/main.cpp — the `sinter` command-line tool: inspect the op registry and the build
#include "ops/registry.hpp"

#include <llvm/Config/llvm-config.h>

#include <cstdio>
#include <cstring>
#include <string_view>

namespace {

void print_usage(std::FILE* to) {
  std::fprintf(to, "usage: sinter <command>\n\n"
                   "commands:\n"
                   "  ops        list every registered op: name arity grad=yes|no\n"
                   "  version    print the sinter and LLVM versions\n"
                   "  help       show this message\n");
}

int list_ops() {
  for (std::size_t i = 0; i < sinter::num_ops; ++i) {
    auto op = static_cast<sinter::OpId>(i);
    const sinter::OpDef& def = sinter::op_def(op);
    std::string arity = def.arity < 0 ? "n" : std::to_string(def.arity);
    std::printf("%s %s grad=%s\n", std::string(sinter::op_name(op)).c_str(), arity.c_str(),
                def.differentiable ? "yes" : "no");
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  std::string_view command = argv[1];
  if (command == "ops") return list_ops();
  if (command == "version") {
    std::printf("sinter 0.1.0 (LLVM %s)\n", LLVM_VERSION_STRING);
    return 0;
  }
  if (command == "help" || command == "--help" || command == "-h") {
    print_usage(stdout);
    return 0;
  }
  std::fprintf(stderr, "sinter: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
