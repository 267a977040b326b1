// The few POSIX file operations the disk store builds on, with errno kept for
// the caller to classify. Used by cache/ and by the tool that inspects it.
#pragma once
#include <sys/stat.h>

#include <cerrno>

#include <string>
#include <vector>

#include "cache/disk_error.h"

namespace lazyjit::cache::posix_io {

// Opens an existing regular file with `flags` (O_RDONLY, O_RDWR) plus
// O_CLOEXEC, never following a symlink nor blocking on a FIFO or device
// (O_NOFOLLOW|O_NONBLOCK, then fstat; O_NONBLOCK is cleared again on success).
// Returns the descriptor, or -1 with errno set: ENOENT and the like as open()
// says, kNotRegular for a FIFO, device, socket, directory or symlink.
inline constexpr int kNotRegular = ENOTSUP;
int open_regular(const std::string& path, int flags);
// The same for `name` in the directory open at `dir_fd` (openat; AT_FDCWD: a path).
int open_regular_at(int dir_fd, const std::string& name, int flags);
// "a FIFO", "a directory", ... for a refusal message; "a symlink" for ELOOP.
std::string file_type_name(const std::string& path);
std::string file_type_name_at(int dir_fd, const std::string& name);
// Opens `name` in `dir_fd` as a directory without following a symlink
// (O_DIRECTORY|O_NOFOLLOW). -1 with errno set: ELOOP or ENOTDIR for what is not one.
int open_dir_at(int dir_fd, const std::string& name);

// Loops over short writes and EINTR. False with errno set on failure.
bool write_all(int fd, const char* data, size_t len);
// Reads fd to its end into *out. False with errno set on failure.
bool read_all(int fd, std::string* out);
// ENOSPC/EDQUOT -> Full, EROFS -> ReadOnly, EACCES/EPERM -> Permission, else Io.
DiskError error_kind(int err);
// "<what>: <strerror(err)>"
std::string error_text(const std::string& what, int err);
// Names of the entries of the directory open at `dir_fd` (without "." and
// ".."); empty if unreadable. It is reopened (".") for the listing, so threads
// sharing `dir_fd` may list it at once.
std::vector<std::string> list_dir_at(int dir_fd);
// Modification time in seconds since the epoch, with nanoseconds.
double mtime_seconds(const struct stat& st);
double now_seconds();
// A fresh random 64-bit value as 16 hex digits, for unique file names.
std::string random_hex();

}  // namespace lazyjit::cache::posix_io
