#include "debug/dump.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace lazyjit::debug {

namespace {

std::atomic<bool> g_told{false};

// A dump that cannot be written is said once per process (the next ones would
// say the same, once per compiled program), naming the path and the OS error.
void tell_once(const std::string& path, const std::string& why) {
  if (g_told.exchange(true)) return;
  std::fprintf(stderr,
               "lazyjit: warning: cannot write dumps (LAZYJIT_DUMP, LAZYJIT_DEBUG>=2): %s: %s; dumps are not "
               "written (said once)\n",
               path.c_str(), why.c_str());
}

const char* type_name(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file";
}

}  // namespace

int open_output_file(const std::string& path, std::string* why) {
  struct stat st;
  // Refused before it is opened: opening a device may do something.
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    *why = std::string("it is ") + type_name(st.st_mode) + ", not a regular file";
    return -1;
  }
  // No O_TRUNC yet: what the path names now is checked first.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0666);
  if (fd < 0) {
    int err = errno;
    // ENXIO: a FIFO without a reader (O_NONBLOCK does not wait for one).
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      *why = std::string("it is ") + type_name(st.st_mode) + ", not a regular file";
    else
      *why = std::strerror(err);
    return -1;
  }
  int err = ::fstat(fd, &st) != 0 ? errno : 0;
  if (err == 0 && !S_ISREG(st.st_mode)) {
    ::close(fd);
    *why = std::string("it is ") + type_name(st.st_mode) + ", not a regular file";
    return -1;
  }
  if (err == 0 && ::ftruncate(fd, 0) != 0) err = errno;
  int fl = err == 0 ? ::fcntl(fd, F_GETFL) : -1;
  if (err == 0 && (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)) err = errno;
  if (err != 0) {
    ::close(fd);
    *why = std::strerror(err);
    return -1;
  }
  return fd;
}

std::FILE* fopen_output_file(const std::string& path, std::string* why) {
  int fd = open_output_file(path, why);
  if (fd < 0) return nullptr;
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    *why = std::strerror(errno);
    ::close(fd);
  }
  return f;
}

void write_dump(const std::string& dir, const std::string& name, const std::string& content) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return tell_once(dir, ec.message());
  std::string path = (std::filesystem::path(dir) / name).string();
  std::string why;
  std::FILE* f = fopen_output_file(path, &why);
  if (!f) return tell_once(path, why);
  bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  int err = ok ? 0 : errno;
  if (std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (!ok) tell_once(path, std::strerror(err));
}

}  // namespace lazyjit::debug
