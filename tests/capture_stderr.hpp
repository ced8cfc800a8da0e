// tests/capture_stderr.hpp — capture_stderr(): what a piece of code writes to stderr (fd 2)
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace sinter::testing {

/// Runs `body` with file descriptor 2 sent to a temporary file and returns what was written
/// there (C stdio and anything else writing to fd 2). Restores stderr even if `body` throws.
template <class Body> std::string capture_stderr(Body body) {
  std::fflush(stderr);
  std::FILE* sink = std::tmpfile();
  if (!sink) throw std::runtime_error("capture_stderr: tmpfile() failed");
  int saved = ::dup(2);
  ::dup2(::fileno(sink), 2);
  auto restore = [&] {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
  };
  try {
    body();
  } catch (...) {
    restore();
    std::fclose(sink);
    throw;
  }
  restore();
  std::string text;
  std::rewind(sink);
  for (int c; (c = std::fgetc(sink)) != EOF;)
    text.push_back(static_cast<char>(c));
  std::fclose(sink);
  return text;
}

} // namespace sinter::testing
