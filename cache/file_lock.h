// An inter-process exclusive lock on one file, held through flock(2).
//
// Stale-lock recovery is the kernel's: flock locks belong to the open file
// description, so when the holder dies (even by SIGKILL) its descriptors close
// and the lock is released. There is no owner pid to check and nothing to
// break by hand. Lock files are never deleted: unlinking one while another
// process has it open (but not yet locked) would let two processes lock two
// different inodes of the same name.
//
// flock is per open file description, so two threads of one process opening
// the file separately also exclude each other. On NFS, Linux emulates flock
// with byte-range locks, which needs the server's lock manager.
#pragma once
#include <chrono>
#include <string>

namespace lazyjit::cache {

class FileLock {
 public:
  FileLock() = default;  // not held
  // Creates `path` (mode 0600) if missing and waits at most `timeout` for the
  // lock. Returns a lock that is not held on timeout or if the file cannot be
  // opened (a read-only directory); `error` (if given) then says why.
  static FileLock acquire(const std::string& path, std::chrono::milliseconds timeout, std::string* error = nullptr);

  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock& operator=(FileLock&& o) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() { release(); }

  bool held() const { return fd_ >= 0; }
  explicit operator bool() const { return held(); }
  void release();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace lazyjit::cache
