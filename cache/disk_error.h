// What can go wrong with the on-disk compile cache. Every kind is reported to
// the caller (who counts it) and none is fatal: the worst outcome is a miss or
// a result that is not persisted.
#pragma once

namespace lazyjit::cache {

enum class DiskError {
  Corrupt,       // damaged entry: truncated, zero bytes, bad checksum, bad manifest
  Foreign,       // another format version, or refused by the caller's `expect`
  Unsigned,      // a secret is set but the entry carries no signature
  BadSignature,  // a secret is set and the entry's HMAC does not match it
  ReadOnly,      // the directory (or file system) does not take writes
  Full,          // ENOSPC / EDQUOT, or an entry larger than the whole budget
  Permission,    // EACCES / EPERM on a single operation
  Io,            // any other system call failure
  WrongKey,      // a valid entry, but stored for another key than the one looked up
  NotAFile,      // a FIFO, device, directory or symlink where a regular file belongs
};

// Stable lower-case name ("corrupt", "bad_signature", ...) for logs and counters.
const char* disk_error_name(DiskError e);

}  // namespace lazyjit::cache
