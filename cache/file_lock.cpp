#include "cache/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "cache/posix_io.h"

namespace lazyjit::cache {
namespace {

// Whether `name` in `dir_fd` still leads to the file open at `fd`.
bool still_named(int fd, int dir_fd, const std::string& name) {
  struct stat mine, named;
  return ::fstat(fd, &mine) == 0 && ::fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 &&
         mine.st_dev == named.st_dev && mine.st_ino == named.st_ino;
}

}  // namespace

FileLock FileLock::acquire(int dir_fd, const std::string& name, std::chrono::milliseconds timeout,
                           std::string* error) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    // O_NONBLOCK: a FIFO or device planted at the name must not block the open.
    int fd = ::openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd < 0) {
      if (error) *error = "cannot open lock file " + name + ": " + std::strerror(errno);
      return {};
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      if (error) *error = "lock file " + name + " is not a regular file";
      ::close(fd);
      return {};
    }
    // Poll rather than block: a blocking flock cannot time out without signals.
    // The backoff keeps a waiter cheap while a compile (seconds) holds the lock.
    bool locked = false;
    for (;;) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
        locked = true;
        break;
      }
      if (errno != EWOULDBLOCK && errno != EINTR) {
        if (error) *error = "cannot lock " + name + ": " + std::strerror(errno);
        break;
      }
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        if (error) *error = "timed out waiting for " + name;
        break;
      }
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    if (!locked) {
      ::close(fd);
      return {};
    }
    if (still_named(fd, dir_fd, name)) return FileLock(fd, ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0), name);
    // The previous holder removed this file as it let go: start over on the
    // file the name leads to now.
    ::close(fd);
    if (std::chrono::steady_clock::now() > deadline) {
      if (error) *error = "timed out waiting for " + name;
      return {};
    }
  }
}

size_t FileLock::remove_unheld(int dir_fd) {
  size_t removed = 0;
  for (const std::string& name : posix_io::list_dir_at(dir_fd)) {
    int fd = posix_io::open_regular_at(dir_fd, name, O_RDONLY);  // never creates
    if (fd < 0) continue;
    // Locked, it is ours as it would be any holder's: removing it is a release.
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && still_named(fd, dir_fd, name) &&
        ::unlinkat(dir_fd, name.c_str(), 0) == 0)
      ++removed;
    ::close(fd);
  }
  return removed;
}

size_t FileLock::remove_unheld(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t removed = remove_unheld(fd);
  ::close(fd);
  return removed;
}

FileLock& FileLock::operator=(FileLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    dir_fd_ = o.dir_fd_;
    name_ = std::move(o.name_);
    o.fd_ = o.dir_fd_ = -1;
  }
  return *this;
}

void FileLock::release() {
  if (fd_ < 0) return;
  // Unlink before unlocking: a waiter that gets this file's lock then finds it
  // unnamed and starts over, so nobody holds a file that no longer counts.
  if (dir_fd_ >= 0) {
    if (still_named(fd_, dir_fd_, name_)) ::unlinkat(dir_fd_, name_.c_str(), 0);
    ::close(dir_fd_);
    dir_fd_ = -1;
  }
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
  fd_ = -1;
}

}  // namespace lazyjit::cache
