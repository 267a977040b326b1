#include "cache/disk_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cache/entry_file.h"
#include "cache/posix_io.h"
#include "env/env.h"

namespace lazyjit::cache {

void DiskStore::check_key(const std::string& key) {
  bool ok = !key.empty() && key.size() <= 200 && key[0] != '.';
  for (char c : key)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                c == '-');
  if (!ok) throw std::invalid_argument("disk cache key is not a safe file name: '" + key + "'");
}

void DiskStore::report(DiskError kind, DiskOp op, const std::string& message) const {
  if (on_error) on_error(kind, op, message);
}

void DiskStore::reject(const std::string& key, DiskError kind, const std::string& message) {
  int fd = posix_io::open_regular_at(entries_fd_, key + ".ljc", O_RDONLY);
  if (fd >= 0) {
    quarantine(key, fd, kind);
    ::close(fd);
  }
  report(kind, DiskOp::Read, key + ": " + message);
}

void DiskStore::quarantine(const std::string& key, int fd, DiskError kind) {
  if (read_only_) return;
  std::string name = key + ".ljc";
  // Move only the file we read: a writer may have published a good entry
  // under the same name since we opened ours.
  struct stat opened, now;
  if (::fstat(fd, &opened) != 0 || ::fstatat(entries_fd_, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0) return;
  if (opened.st_dev != now.st_dev || opened.st_ino != now.st_ino) return;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch());
  std::string dest = key + "." + disk_error_name(kind) + "." + std::to_string(ns.count()) + "." +
                     posix_io::random_hex() + ".ljc";
  // Best effort: a concurrent reader may have moved it first.
  ::renameat(entries_fd_, name.c_str(), quarantine_fd_, dest.c_str());
}

std::optional<entry_file::VerifiedEntry> DiskStore::get(
    const std::string& key, const std::function<bool(const std::string& manifest)>& expect) {
  check_key(key);
  if (entries_fd_ < 0) return std::nullopt;  // a read-only store without entries/
  std::string path = root_ + "/entries/" + key + ".ljc";
  if (!still_private(entries_fd_, root_ + "/entries", DiskOp::Read)) return std::nullopt;
  int fd = posix_io::open_regular_at(entries_fd_, key + ".ljc", O_RDONLY);
  if (fd < 0) {
    int err = errno;
    if (err == posix_io::kNotRegular) {
      report(DiskError::NotAFile, DiskOp::Read, path + " is " + posix_io::file_type_name_at(entries_fd_, key + ".ljc") +
                                                    ", not a regular file: refused without reading it");
    } else if (err != ENOENT) {
      report(posix_io::error_kind(err), DiskOp::Read, posix_io::error_text("cannot open " + path, err));
    }
    return std::nullopt;
  }
  std::string bytes;
  if (!posix_io::read_all(fd, &bytes)) {
    report(posix_io::error_kind(errno), DiskOp::Read, posix_io::error_text("cannot read " + path, errno));
    ::close(fd);
    return std::nullopt;
  }
  auto verified = entry_file::verify(std::move(bytes), options_.secret, key, expect);
  if (auto* err = std::get_if<entry_file::DecodeError>(&verified)) {
    quarantine(key, fd, err->kind);
    ::close(fd);
    report(err->kind, DiskOp::Read, path + ": " + err->message);
    return std::nullopt;
  }
  ::close(fd);
  return std::get<entry_file::VerifiedEntry>(std::move(verified));
}

std::string DiskStore::encode(const std::string& key, const std::string& manifest_json,
                              const std::string& payload) const {
  check_key(key);
  return entry_file::encode(entry_file::complete_manifest(manifest_json, key, payload), payload, options_.secret);
}

bool DiskStore::put(const std::string& key, const std::string& manifest_json, const std::string& payload) {
  check_key(key);
  std::string manifest = entry_file::complete_manifest(manifest_json, key, payload);
  if (read_only_) {
    report(DiskError::ReadOnly, DiskOp::Write, root_ + " is read-only: entry " + key + " not written");
    return false;
  }
  return publish(key, entry_file::encode(manifest, payload, options_.secret));
}

bool DiskStore::put_file(const std::string& key, const std::string& file) {
  check_key(key);
  auto decoded = entry_file::decode(file, options_.secret, key);
  if (auto* err = std::get_if<entry_file::DecodeError>(&decoded)) {
    report(err->kind, DiskOp::Write, "entry " + key + " not written: " + err->message);
    return false;
  }
  if (read_only_) {
    report(DiskError::ReadOnly, DiskOp::Write, root_ + " is read-only: entry " + key + " not written");
    return false;
  }
  return publish(key, file);
}

bool DiskStore::publish(const std::string& key, const std::string& file) {
  if (file.size() > options_.max_bytes) {
    report(DiskError::Full, DiskOp::Write, "entry " + key + " (" + std::to_string(file.size()) + " bytes) exceeds the cache budget of " +
                                std::to_string(options_.max_bytes) + " bytes");
    return false;
  }
  // A tmp/ that others may write would let them swap the file before the rename.
  if (!still_private(tmp_fd_, root_ + "/tmp", DiskOp::Write) ||
      !still_private(entries_fd_, root_ + "/entries", DiskOp::Write))
    return false;
  std::string error;
  int err = write_entry(key, file, &error);
  // A full disk: make room as eviction would, oldest first, and try once more.
  if ((err == ENOSPC || err == EDQUOT) && evict_lru(UINT64_MAX, file.size()) > 0) err = write_entry(key, file, &error);
  if (err != 0) {
    report(posix_io::error_kind(err), DiskOp::Write, error);
    return false;
  }
  evict();
  return true;
}

int DiskStore::write_entry(const std::string& key, const std::string& file, std::string* error) {
  std::string tmp_name = key + "." + std::to_string(::getpid()) + "." + posix_io::random_hex() + ".tmp";
  std::string tmp = root_ + "/tmp/" + tmp_name, dest = root_ + "/entries/" + key + ".ljc";
  int fd = ::openat(tmp_fd_, tmp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    int err = errno;
    *error = posix_io::error_text("cannot create " + tmp, err);
    return err;
  }
  auto fail = [&](const std::string& what) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlinkat(tmp_fd_, tmp_name.c_str(), 0);
    *error = posix_io::error_text(what, err);
    return err;
  };
  size_t half = file.size() / 2;
  if (!posix_io::write_all(fd, file.data(), half)) return fail("cannot write " + tmp);
  // Test-only faults, halfway through so that a test sees a partial tmp file.
  if (auto k = env::find("LAZYJIT_TEST_PAUSE_IN_WRITE"); k && (key == *k || *k == "*"))
    std::this_thread::sleep_for(std::chrono::seconds(30));
  if (env::get("LAZYJIT_TEST_DISK_FULL") == "1") {
    errno = ENOSPC;
    return fail("cannot write " + tmp + " (LAZYJIT_TEST_DISK_FULL)");
  }
  if (!posix_io::write_all(fd, file.data() + half, file.size() - half)) return fail("cannot write " + tmp);
  if (::fsync(fd) != 0) return fail("cannot fsync " + tmp);
  int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail("cannot close " + tmp);
  if (::renameat(tmp_fd_, tmp_name.c_str(), entries_fd_, (key + ".ljc").c_str()) != 0)
    return fail("cannot rename " + tmp + " to " + dest);
  // The entry is published either way; a failed directory fsync only risks
  // losing it at a power cut, which is a later miss, not damage.
  ::fsync(entries_fd_);
  return 0;
}

DiskStore::KeyLock DiskStore::lock(const std::string& key, std::chrono::milliseconds timeout) {
  check_key(key);
  if (read_only_) return {};
  return FileLock::acquire(locks_fd_, key + ".lock", timeout);
}

}  // namespace lazyjit::cache
