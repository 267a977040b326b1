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
// "a FIFO", "a directory", ... for a refusal message; "a symlink" for ELOOP.
std::string file_type_name(const std::string& path);

// Loops over short writes and EINTR. False with errno set on failure.
bool write_all(int fd, const char* data, size_t len);
// Reads fd to its end into *out. False with errno set on failure.
bool read_all(int fd, std::string* out);
// Makes a rename or unlink inside `dir` durable. False with errno set on failure.
bool fsync_dir(const std::string& dir);
// ENOSPC/EDQUOT -> Full, EROFS -> ReadOnly, EACCES/EPERM -> Permission, else Io.
DiskError error_kind(int err);
// "<what>: <strerror(err)>"
std::string error_text(const std::string& what, int err);
// Names of the entries of `dir` (without "." and ".."); empty if unreadable.
std::vector<std::string> list_dir(const std::string& dir);
// Modification time in seconds since the epoch, with nanoseconds.
double mtime_seconds(const struct stat& st);
double now_seconds();
// A fresh random 64-bit value as 16 hex digits, for unique file names.
std::string random_hex();

}  // namespace lazyjit::cache::posix_io
