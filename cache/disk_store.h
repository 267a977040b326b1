// The on-disk tier of the compile cache: a byte store shared by the processes
// of one user, keyed by a caller-chosen string. It knows nothing of programs:
// an entry is a JSON manifest (the caller's object) and an opaque payload.
//
// Layout under the caller's directory (all directories mode 0700):
//   v1/entries/<key>.ljc    one entry, format in cache/entry_file.h
//   v1/entries/<key>.stats  {"hits": N, "last_used": <unix seconds, float>}; best-effort
//   v1/locks/<key>.lock     flock target of DiskStore::lock (cache/file_lock.h); exists while held
//   v1/tmp/                 entries being written: <key>.<pid>.<random>.tmp
//   v1/quarantine/          refused or damaged entries: <key>.<kind>.<unix ns>.<random>.ljc
// When an entry was created is the manifest's business (the caller supplies
// it) or else the file's mtime.
//
// The directory is opened once, by open(): every directory on the way to it is
// checked (as OpenSSH checks the path to a key file), and from then on every
// file operation is relative to descriptors of dir/v1 and its subdirectories
// (openat, renameat, unlinkat, fstatat, never following a symlink). Renaming
// the directory away and putting another in its place changes nothing for an
// open store: it goes on in the directory it checked.
//
// What must hold, with any number of processes reading and writing at once:
//  - entries/<key>.ljc is always a complete file: writers publish by rename
//    from tmp/, after fsync. A crash leaves at most a tmp file, which
//    cleanup() removes.
//  - Files are never rewritten in place; they are replaced, renamed away or
//    unlinked. A reader that opened a file keeps reading the bytes it opened
//    (POSIX), so eviction or quarantine under a reader never tears its read.
//  - Every refusal or damage turns into a miss plus on_error(kind, message);
//    nothing here throws on bad files, bad permissions or a full disk.
//  - Once on_error is set, a DiskStore holds no mutable state: its methods
//    may run on several threads at once, and call on_error from any of them.
//
// Keys are file names: 1 to 200 characters from [A-Za-z0-9._-], not starting
// with '.'. A bad key (a caller bug) throws std::invalid_argument, as does a
// manifest that is not a JSON object.
//
// Test-only fault hooks, read by put() from the environment:
//   LAZYJIT_TEST_PAUSE_IN_WRITE=<key>  put(<key>) sleeps 30 s after writing half its tmp file ("*": any key)
//   LAZYJIT_TEST_DISK_FULL=1           put() fails with ENOSPC after writing half its tmp file
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/disk_error.h"
#include "cache/entry_file.h"
#include "cache/file_lock.h"

namespace lazyjit::cache {

struct DiskStoreOptions {
  std::string dir;                   // already resolved by the caller
  uint64_t max_bytes = 2ull << 30;   // budget for the sum of entries/*.ljc sizes
  std::string secret;                // empty: write unsigned entries, accept any
};

// Which side of the store a fault happened on: a read fault is a miss (the
// caller compiles), a write fault a program not saved (it still runs).
enum class DiskOp { Read, Write };

class DiskStore {
 public:
  using KeyLock = FileLock;  // held() / explicit bool; the destructor unlocks

  // Creates dir/v1/... (mode 0700) where missing, then runs cleanup().
  // Returns nullptr with a *warning if `dir` cannot be created. Refuses, like
  // ssh with a loose key file, a directory (dir itself or one under it) that
  // is writable by group or others or owned by another user, and a directory
  // that another user could replace: one whose parent, or any directory above
  // it (symlinks resolved), is writable by group or others without the sticky
  // bit or owned by a user other than root and this one. Then it returns
  // nullptr and sets *warning to a one-line message naming the directory and
  // why. A directory that
  // does not take writes opens read-only: get() works, put() is skipped and
  // reported as ReadOnly, lock() returns an unheld lock.
  static std::unique_ptr<DiskStore> open(const DiskStoreOptions& options, std::string* warning);

  // A hit: the entry after entry_file::verify (header, version, lengths,
  // checksum, the manifest's payload fields, its key against `key` and, when a
  // secret is set, the signature: an unsigned or wrongly signed entry is
  // refused). `expect`, if set, sees the manifest text and returns false to
  // refuse a foreign target or version. What is not a regular file (a FIFO, a
  // device, a symlink) is refused without blocking. Any refusal or damage
  // moves the file to quarantine/ (never deletes it), calls on_error and
  // returns nullopt. A missing file is a plain nullopt. An entries directory
  // that has become writable by group or others since open() is not read
  // (Permission).
  std::optional<entry_file::VerifiedEntry> get(const std::string& key,
                                               const std::function<bool(const std::string& manifest)>& expect);

  // Publishes atomically (tmp file, fsync, rename, fsync of entries/), then
  // evicts. `manifest_json` must be a JSON object; key, payload_bytes and
  // payload_xxh64 are set in it. Returns false after on_error on failure:
  // ENOSPC/EDQUOT or an entry larger than max_bytes -> Full; EROFS or a
  // read-only store -> ReadOnly; EACCES/EPERM -> Permission; else Io. On
  // ENOSPC/EDQUOT it first evicts the least recently used entries worth the
  // new file's size and tries once more. A failed put leaves no tmp file behind.
  bool put(const std::string& key, const std::string& manifest_json, const std::string& payload);

  // The entry file put() would write under `key` for this manifest and
  // payload (signed with the store's secret, if any): what another tier or
  // machine receives.
  std::string encode(const std::string& key, const std::string& manifest_json, const std::string& payload) const;
  // Publishes an entry file as it is (its bytes, signature included), as put()
  // does, after the checks get() makes (with the store's secret, and its key
  // against `key`): one that fails them is reported and not written. For
  // entries that come from elsewhere (a remote tier, `lazyjit-cache remote pull`).
  bool put_file(const std::string& key, const std::string& file);

  // Best-effort hits/last_used update of <key>.stats (tmp + rename; updates
  // racing between processes may be lost). Call it when a hit is used: it is
  // what eviction orders by. Silent on failure and in read-only mode.
  void record_hit(const std::string& key);

  // Per-key inter-process lock so that processes missing the same key compile
  // it once: flock(LOCK_EX) on locks/<key>.lock, waiting at most `timeout`. A
  // holder that dies releases it (the kernel closes its descriptors); the lock
  // file goes when the lock is released; see cache/file_lock.h. Unheld on
  // timeout or in read-only mode.
  KeyLock lock(const std::string& key, std::chrono::milliseconds timeout);

  // For an entry get() returned whose payload the caller cannot use (a format
  // it does not know): moves it to quarantine/ and reports `kind`.
  void reject(const std::string& key, DiskError kind, const std::string& message);

  // Least recently used first (the later of .stats last_used and the .ljc
  // mtime, so a just-written entry counts as used), unlinks entries until the
  // .ljc files total at most max_bytes. Run by put(); costs one stat per
  // entry while under budget.
  void evict();

  // Removes tmp files whose writer is gone (its pid is not alive here) or
  // which are older than a minute, quarantine files older than a day, and
  // lock files nobody holds (left by killed holders).
  void cleanup();

  // The keys of entries/*.ljc with their files' mtimes, in no order.
  struct Listed {
    std::string key;
    double mtime = 0;
  };
  std::vector<Listed> list() const;

  bool read_only() const { return read_only_; }
  // dir/v1 as named at open(), for messages: the store itself never uses it.
  const std::string& root() const { return root_; }

  ~DiskStore();
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  std::function<void(DiskError, DiskOp, const std::string&)> on_error;  // set by the caller

 private:
  DiskStore(DiskStoreOptions options, std::string root);
  static void check_key(const std::string& key);  // throws std::invalid_argument
  void report(DiskError kind, DiskOp op, const std::string& message) const;
  void quarantine(const std::string& key, int fd, DiskError kind);
  bool publish(const std::string& key, const std::string& file);
  // Writes `file` as entries/<key>.ljc through tmp/. 0, or the errno of the
  // step that failed with *error saying which (nothing is left in tmp/).
  int write_entry(const std::string& key, const std::string& file, std::string* error);
  // Unlinks least recently used entries, the oldest first, until what is left
  // totals at most `keep_at_most` bytes and `free_at_least` bytes are gone.
  // Returns the bytes freed.
  uint64_t evict_lru(uint64_t keep_at_most, uint64_t free_at_least);
  // False after on_error(Permission) if the directory open at `fd` is no
  // longer this user's alone.
  bool still_private(int fd, const std::string& path, DiskOp op) const;

  DiskStoreOptions options_;
  std::string root_;
  bool read_only_ = false;
  // Descriptors of dir, dir/v1 and its subdirectories; -1 where a read-only
  // store found one missing.
  int dir_fd_ = -1, root_fd_ = -1, entries_fd_ = -1, locks_fd_ = -1, tmp_fd_ = -1, quarantine_fd_ = -1;
};

}  // namespace lazyjit::cache
