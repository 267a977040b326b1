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

namespace lazyjit::cache {

void DiskStore::check_key(const std::string& key) {
  bool ok = !key.empty() && key.size() <= 200 && key[0] != '.';
  for (char c : key)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                c == '-');
  if (!ok) throw std::invalid_argument("disk cache key is not a safe file name: '" + key + "'");
}

namespace {

const char* const kSubdirs[] = {"entries", "locks", "tmp", "quarantine"};

std::string octal_mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(m & 07777));
  return buf;
}

// Why `path` (which exists) must not hold the cache, or "" if it may. Anyone
// who can write into it could plant an entry, i.e. code this process runs.
std::string unsafe_reason(const std::string& path, const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return path + " is not a directory";
  if (st.st_uid != ::geteuid())
    return path + " is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
           std::to_string(::geteuid()) + ")";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return path + " is writable by group or others (mode " + octal_mode(st.st_mode) + "); run chmod 700 " + path;
  return "";
}

// mkdir -p with mode 0700 for every directory it creates. False with errno set.
bool make_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string prefix = path.substr(0, i);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  return true;
}

}  // namespace

DiskStore::DiskStore(DiskStoreOptions options, std::string root, bool read_only)
    : options_(std::move(options)), root_(std::move(root)), read_only_(read_only) {}

std::unique_ptr<DiskStore> DiskStore::open(const DiskStoreOptions& options, std::string* warning) {
  auto refuse = [&](const std::string& why) {
    if (warning) *warning = "lazyjit: not using the on-disk compile cache: " + why;
    return nullptr;
  };
  std::string dir = options.dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) return refuse("no directory given");
  if (!make_dirs(dir)) return refuse(posix_io::error_text("cannot create " + dir, errno));

  // `dir` may be a symlink (say ~/.cache -> elsewhere), so stat follows it; the
  // directories we create under it must be real directories.
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return refuse(posix_io::error_text("cannot stat " + dir, errno));
  if (std::string why = unsafe_reason(dir, st); !why.empty()) return refuse(why);

  std::string root = dir + "/v1";
  bool read_only = false;
  std::vector<std::string> dirs = {root};
  for (const char* sub : kSubdirs) dirs.push_back(root + "/" + sub);
  for (const std::string& path : dirs) {
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      if (errno != EROFS && errno != EACCES && errno != EPERM)
        return refuse(posix_io::error_text("cannot create " + path, errno));
      read_only = true;  // it cannot be created, so it is missing: reads miss
      continue;
    }
    if (::lstat(path.c_str(), &st) != 0) return refuse(posix_io::error_text("cannot stat " + path, errno));
    if (std::string why = unsafe_reason(path, st); !why.empty()) return refuse(why);
  }
  // AT_EACCESS: ask about the effective uid, the one that will write.
  for (const char* sub : kSubdirs)
    if (::faccessat(AT_FDCWD, (root + "/" + sub).c_str(), W_OK | X_OK, AT_EACCESS) != 0) read_only = true;

  std::unique_ptr<DiskStore> store(new DiskStore(options, root, read_only));
  store->options_.dir = dir;
  store->cleanup();
  return store;
}

void DiskStore::report(DiskError kind, DiskOp op, const std::string& message) const {
  if (on_error) on_error(kind, op, message);
}

void DiskStore::reject(const std::string& key, DiskError kind, const std::string& message) {
  std::string path = root_ + "/entries/" + key + ".ljc";
  int fd = posix_io::open_regular(path, O_RDONLY);
  if (fd >= 0) {
    quarantine(key, fd, kind);
    ::close(fd);
  }
  report(kind, DiskOp::Read, key + ": " + message);
}

void DiskStore::quarantine(const std::string& key, int fd, DiskError kind) {
  if (read_only_) return;
  std::string path = root_ + "/entries/" + key + ".ljc";
  // Move only the file we read: a writer may have published a good entry
  // under the same name since we opened ours.
  struct stat opened, now;
  if (::fstat(fd, &opened) != 0 || ::lstat(path.c_str(), &now) != 0) return;
  if (opened.st_dev != now.st_dev || opened.st_ino != now.st_ino) return;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch());
  std::string dest = root_ + "/quarantine/" + key + "." + disk_error_name(kind) + "." + std::to_string(ns.count()) +
                     "." + posix_io::random_hex() + ".ljc";
  ::rename(path.c_str(), dest.c_str());  // best effort: a concurrent reader may have moved it first
}

std::optional<entry_file::VerifiedEntry> DiskStore::get(
    const std::string& key, const std::function<bool(const std::string& manifest)>& expect) {
  check_key(key);
  std::string path = root_ + "/entries/" + key + ".ljc";
  int fd = posix_io::open_regular(path, O_RDONLY);
  if (fd < 0) {
    int err = errno;
    if (err == posix_io::kNotRegular) {
      report(DiskError::NotAFile, DiskOp::Read, path + " is " + posix_io::file_type_name(path) +
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
  std::string tmp = root_ + "/tmp/" + key + "." + std::to_string(::getpid()) + "." + posix_io::random_hex() + ".tmp";
  std::string dest = root_ + "/entries/" + key + ".ljc";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    report(posix_io::error_kind(errno), DiskOp::Write, posix_io::error_text("cannot create " + tmp, errno));
    return false;
  }
  auto fail = [&](const std::string& what) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    report(posix_io::error_kind(err), DiskOp::Write, posix_io::error_text(what, err));
    return false;
  };
  size_t half = file.size() / 2;
  if (!posix_io::write_all(fd, file.data(), half)) return fail("cannot write " + tmp);
  // Test-only faults, halfway through so that a test sees a partial tmp file.
  if (const char* k = std::getenv("LAZYJIT_TEST_PAUSE_IN_WRITE"); k && (key == k || std::strcmp(k, "*") == 0))
    std::this_thread::sleep_for(std::chrono::seconds(30));
  if (const char* full = std::getenv("LAZYJIT_TEST_DISK_FULL"); full && std::strcmp(full, "1") == 0) {
    errno = ENOSPC;
    return fail("cannot write " + tmp + " (LAZYJIT_TEST_DISK_FULL)");
  }
  if (!posix_io::write_all(fd, file.data() + half, file.size() - half)) return fail("cannot write " + tmp);
  if (::fsync(fd) != 0) return fail("cannot fsync " + tmp);
  int closed = ::close(fd);
  fd = -1;
  if (closed != 0) return fail("cannot close " + tmp);
  if (::rename(tmp.c_str(), dest.c_str()) != 0) return fail("cannot rename " + tmp + " to " + dest);
  // The entry is published either way; a failed directory fsync only risks
  // losing it at a power cut, which is a later miss, not damage.
  posix_io::fsync_dir(root_ + "/entries");
  evict();
  return true;
}

DiskStore::KeyLock DiskStore::lock(const std::string& key, std::chrono::milliseconds timeout) {
  check_key(key);
  if (read_only_) return {};
  return FileLock::acquire(root_ + "/locks/" + key + ".lock", timeout);
}

}  // namespace lazyjit::cache
