// An inter-process exclusive lock on one file, held through flock(2).
//
// Stale-lock recovery is the kernel's: flock locks belong to the open file
// description, so when the holder dies (even by SIGKILL) its descriptors close
// and the lock is released. There is no owner pid to check and nothing to
// break by hand.
//
// A lock file exists only while its lock is held: the holder unlinks it just
// before it unlocks. Whoever then gets the lock on the unlinked file (a waiter
// that had opened it) sees that its name no longer leads to that file and
// starts over on a fresh one. So a lock is held exactly when the file its name
// leads to is flocked, and two processes never hold one name at once. A file
// left by a killed holder is removed by remove_unheld(), which takes the lock
// first, as any holder would.
//
// Everything is relative to a directory descriptor (openat, never following a
// symlink), so a directory renamed away and replaced meanwhile is not used.
//
// flock is per open file description, so two threads of one process opening
// the file separately also exclude each other. On NFS, Linux emulates flock
// with byte-range locks, which needs the server's lock manager.
#pragma once
#include <chrono>
#include <cstddef>
#include <string>

namespace lazyjit::cache {

class FileLock {
 public:
  FileLock() = default;  // not held
  // Creates `name` (mode 0600) in the directory open at `dir_fd` if missing and
  // waits at most `timeout` for the lock. Returns a lock that is not held on
  // timeout or if the file cannot be opened (a read-only directory); `error`
  // (if given) then says why. The lock keeps its own copy of `dir_fd`.
  static FileLock acquire(int dir_fd, const std::string& name, std::chrono::milliseconds timeout,
                          std::string* error = nullptr);
  // Removes every file in the directory open at `dir_fd` (or at `dir`) whose
  // lock nobody holds: what killed holders left. Returns how many it removed.
  static size_t remove_unheld(int dir_fd);
  static size_t remove_unheld(const std::string& dir);

  FileLock(FileLock&& o) noexcept : fd_(o.fd_), dir_fd_(o.dir_fd_), name_(std::move(o.name_)) {
    o.fd_ = o.dir_fd_ = -1;
  }
  FileLock& operator=(FileLock&& o) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() { release(); }

  bool held() const { return fd_ >= 0; }
  explicit operator bool() const { return held(); }
  // Unlinks the lock file (if its name still leads to it), then unlocks.
  void release();

 private:
  FileLock(int fd, int dir_fd, std::string name) : fd_(fd), dir_fd_(dir_fd), name_(std::move(name)) {}
  int fd_ = -1;
  int dir_fd_ = -1;  // owned; -1: leave the file in place
  std::string name_;
};

}  // namespace lazyjit::cache
