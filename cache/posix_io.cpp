#include "cache/posix_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

namespace lazyjit::cache::posix_io {

int open_regular(const std::string& path, int flags) { return open_regular_at(AT_FDCWD, path, flags); }

int open_regular_at(int dir_fd, const std::string& name, int flags) {
  int fd = ::openat(dir_fd, name.c_str(), flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) errno = kNotRegular;  // O_NOFOLLOW met a symlink
    return -1;
  }
  struct stat st;
  int err = ::fstat(fd, &st) != 0 ? errno : S_ISREG(st.st_mode) ? 0 : kNotRegular;
  if (err != 0) {
    ::close(fd);
    errno = err;
    return -1;
  }
  int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

std::string file_type_name(const std::string& path) { return file_type_name_at(AT_FDCWD, path); }

std::string file_type_name_at(int dir_fd, const std::string& name) {
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return "missing";
  if (S_ISLNK(st.st_mode)) return "a symlink";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  return S_ISREG(st.st_mode) ? "a regular file" : "not a regular file";
}

bool write_all(int fd, const char* data, size_t len) {
  while (len > 0) {
    ssize_t n = ::write(fd, data, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, std::string* out) {
  out->clear();
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out->reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) return true;
    out->append(buf, static_cast<size_t>(n));
  }
}

DiskError error_kind(int err) {
  switch (err) {
    case kNotRegular: return DiskError::NotAFile;
    case ENOSPC:
    case EDQUOT: return DiskError::Full;
    case EROFS: return DiskError::ReadOnly;
    case EACCES:
    case EPERM: return DiskError::Permission;
    default: return DiskError::Io;
  }
}

std::string error_text(const std::string& what, int err) {
  return what + ": " + (err == kNotRegular ? std::string("not a regular file") : std::strerror(err));
}

int open_dir_at(int dir_fd, const std::string& name) {
  return ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

namespace {

// Lists the directory open at `fd` and closes `fd`.
std::vector<std::string> list_open_dir(int fd) {
  std::vector<std::string> names;
  if (fd < 0) return names;
  DIR* d = ::fdopendir(fd);  // owns `fd` from here
  if (!d) {
    ::close(fd);
    return names;
  }
  while (struct dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  ::closedir(d);
  return names;
}

}  // namespace

std::vector<std::string> list_dir_at(int dir_fd) { return list_open_dir(open_dir_at(dir_fd, ".")); }

double mtime_seconds(const struct stat& st) { return double(st.st_mtim.tv_sec) + double(st.st_mtim.tv_nsec) * 1e-9; }

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_hex() {
  // Seeded per thread; after fork() a child repeats its parent's sequence, which
  // is harmless because every name that uses this also holds the pid.
  thread_local std::mt19937_64 rng{std::random_device{}() ^ (uint64_t(::getpid()) << 32)};
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)rng());
  return buf;
}

}  // namespace lazyjit::cache::posix_io
