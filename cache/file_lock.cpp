#include "cache/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace lazyjit::cache {

FileLock FileLock::acquire(const std::string& path, std::chrono::milliseconds timeout, std::string* error) {
  // O_NONBLOCK: a FIFO or device planted at the path must not block the open.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
  if (fd < 0) {
    if (error) *error = "cannot open lock file " + path + ": " + std::strerror(errno);
    return {};
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (error) *error = "lock file " + path + " is not a regular file";
    ::close(fd);
    return {};
  }
  // Poll rather than block: a blocking flock cannot time out without signals.
  // The backoff keeps a waiter cheap while a compile (seconds) holds the lock.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return FileLock(fd);
    if (errno != EWOULDBLOCK && errno != EINTR) {
      if (error) *error = "cannot lock " + path + ": " + std::strerror(errno);
      break;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      if (error) *error = "timed out waiting for " + path;
      break;
    }
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  ::close(fd);
  return {};
}

FileLock& FileLock::operator=(FileLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void FileLock::release() {
  if (fd_ < 0) return;
  ::flock(fd_, LOCK_UN);  // closing would release it too; unlock first to be explicit
  ::close(fd_);
  fd_ = -1;
}

}  // namespace lazyjit::cache
