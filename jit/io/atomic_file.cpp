// jit/io/atomic_file.cpp — temp file beside the target, fsync, rename, fsync of the folder
#include "jit/io/atomic_file.hpp"

#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace sinter {
namespace {

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

/// This host's name as it appears in temporary file names: letters, digits and dots.
const std::string& host_tag() {
  static const std::string tag = [] {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return std::string("host");
    std::string out;
    for (const char* c = name; *c; ++c)
      if (std::isalnum(static_cast<unsigned char>(*c)) || *c == '.') out += *c;
    return out.empty() ? std::string("host") : out;
  }();
  return tag;
}

/// `.<file name>.tmp-<host>-`: the start of every temporary name a write of `file` from this host
/// takes; the writer's process id follows.
std::string temp_prefix(const std::filesystem::path& file) {
  return "." + file.filename().string() + ".tmp-" + host_tag() + "-";
}

} // namespace

void remove_interrupted_writes(const std::filesystem::path& file) {
  namespace fs = std::filesystem;
  const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  const std::string prefix = temp_prefix(file);
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    // The writer's pid: only a process of this host that is gone left it (a live one, or one
    // whose pid was reused, keeps its file).
    std::string rest = name.substr(prefix.size());
    std::size_t digits = 0;
    while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits])))
      ++digits;
    if (digits == 0 || digits > 9 || digits >= rest.size() || rest[digits] != '-') continue;
    pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, digits)));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    if (fs::is_regular_file(fs::symlink_status(it->path(), ignored)))
      fs::remove(it->path(), ignored);
  }
}

void write_file_atomically(const std::filesystem::path& file,
                           std::span<const std::string_view> pieces, std::string_view what) {
  namespace fs = std::filesystem;
  const std::string name = "sinter: cannot write " +
                           (what.empty() ? std::string() : std::string(what) + " ") +
                           file.string() + ": ";
  const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  fs::path temp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    temp = file.parent_path() / (temp_prefix(file) + std::to_string(::getpid()) + "-" +
                                 std::to_string(stamp) + "-" + std::to_string(attempt));
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && (errno != EEXIST || attempt >= 16))
      throw std::runtime_error(name + "cannot create a temporary file in " + dir.string() + ": " +
                               std::strerror(errno));
  }
  bool ok = true;
  for (std::string_view piece : pieces)
    ok = ok && write_all(fd, piece);
  ok = ok && ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(temp.c_str(), file.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(temp.c_str());
    throw std::runtime_error(name + std::strerror(err) + " (any previous file there is unchanged)");
  }
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd); // best effort: the rename is already atomic, this makes it durable
    ::close(dir_fd);
  }
}

void write_file_atomically(const std::filesystem::path& file, std::string_view text,
                           std::string_view what) {
  const std::string_view pieces[] = {text};
  write_file_atomically(file, pieces, what);
}

} // namespace sinter
