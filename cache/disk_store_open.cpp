// DiskStore::open: the checks that decide whether a directory may hold the
// cache, and the descriptors the store then works through.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "cache/disk_store.h"
#include "cache/posix_io.h"

namespace lazyjit::cache {
namespace {

std::string octal_mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(m & 07777));
  return buf;
}

// Why `path` (open, `st` from fstat) must not hold the cache, or "" if it may.
// Anyone who can write into it could plant an entry, i.e. code this process runs.
std::string unsafe_reason(const std::string& path, const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return path + " is not a directory";
  if (st.st_uid != ::geteuid())
    return path + " is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
           std::to_string(::geteuid()) + ")";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return path + " is writable by group or others (mode " + octal_mode(st.st_mode) + "); run chmod 700 " + path;
  return "";
}

// Why `path`, a directory above the cache `dir`, lets someone else replace it,
// or "". Whoever may rename in a directory may swap what it holds: its owner,
// and without the sticky bit anyone who may write it. Root may do anything anyway.
std::string unsafe_ancestor_reason(const std::string& path, const struct stat& st, const std::string& dir) {
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return path + " is owned by uid " + std::to_string(st.st_uid) + " (neither root nor this user, uid " +
           std::to_string(::geteuid()) + "), who could replace " + dir + " in it; choose another LAZYJIT_CACHE_DIR";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
    return path + " is writable by group or others without the sticky bit (mode " + octal_mode(st.st_mode) +
           "), so another user could replace " + dir + " in it; run chmod go-w " + path +
           " or choose another LAZYJIT_CACHE_DIR";
  return "";
}

// mkdir -p with mode 0700 for every directory it creates. False with errno set.
// What it creates is checked afterwards, by open_checked_dir.
bool make_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string prefix = path.substr(0, i);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// Opens `dir` by walking its resolved path from "/" one directory at a time
// (openat, O_NOFOLLOW), checking each on its descriptor: so what is checked is
// what is opened. Returns the descriptor of `dir`, or -1 with *why set.
int open_checked_dir(const std::string& dir, std::string* why) {
  char* real = ::realpath(dir.c_str(), nullptr);
  if (!real) {
    *why = posix_io::error_text("cannot resolve " + dir, errno);
    return -1;
  }
  std::string resolved(real);
  std::free(real);
  int fd = ::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  std::string path = "/";
  size_t at = 1;
  for (;;) {
    struct stat st;
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      *why = posix_io::error_text("cannot open " + path, errno);
      if (fd >= 0) ::close(fd);
      return -1;
    }
    bool last = at >= resolved.size();
    *why = last ? unsafe_reason(dir, st) : unsafe_ancestor_reason(path, st, dir);
    if (!why->empty()) {
      ::close(fd);
      return -1;
    }
    if (last) return fd;
    size_t end = std::min(resolved.find('/', at), resolved.size());
    std::string name = resolved.substr(at, end - at);
    path += (path == "/" ? "" : "/") + name;
    at = end + 1;
    int next = posix_io::open_dir_at(fd, name);
    ::close(fd);
    fd = next;  // a symlink or file swapped in since realpath: ELOOP/ENOTDIR, refused above
  }
}

}  // namespace

DiskStore::DiskStore(DiskStoreOptions options, std::string root)
    : options_(std::move(options)), root_(std::move(root)) {}

DiskStore::~DiskStore() {
  for (int fd : {dir_fd_, root_fd_, entries_fd_, locks_fd_, tmp_fd_, quarantine_fd_})
    if (fd >= 0) ::close(fd);
}

std::unique_ptr<DiskStore> DiskStore::open(const DiskStoreOptions& options, std::string* warning) {
  auto refuse = [&](const std::string& why) {
    if (warning) *warning = "lazyjit: not using the on-disk compile cache: " + why;
    return nullptr;
  };
  std::string dir = options.dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) return refuse("no directory given");
  if (!make_dirs(dir)) return refuse(posix_io::error_text("cannot create " + dir, errno));

  // `dir` may be a symlink (say ~/.cache -> elsewhere): the walk resolves it and
  // checks where it leads. The directories under it must be real directories.
  std::string why;
  std::unique_ptr<DiskStore> store(new DiskStore(options, dir + "/v1"));
  store->options_.dir = dir;
  store->dir_fd_ = open_checked_dir(dir, &why);
  if (store->dir_fd_ < 0) return refuse(why);

  // Each subdirectory: created if missing, opened without following a
  // symlink, checked on its descriptor.
  auto open_sub = [&](int parent, const char* name, const std::string& path, int* out) {
    if (parent < 0) return true;  // its parent is missing in a read-only store
    if (::mkdirat(parent, name, 0700) != 0 && errno != EEXIST) {
      if (errno != EROFS && errno != EACCES && errno != EPERM) {
        why = posix_io::error_text("cannot create " + path, errno);
        return false;
      }
      store->read_only_ = true;  // it cannot be created, so it is missing: reads miss
      return true;
    }
    *out = posix_io::open_dir_at(parent, name);
    struct stat st;
    if (*out < 0) {
      why = errno == ELOOP || errno == ENOTDIR ? path + " is not a directory"
                                               : posix_io::error_text("cannot open " + path, errno);
      return false;
    }
    if (::fstat(*out, &st) != 0) why = posix_io::error_text("cannot stat " + path, errno);
    else why = unsafe_reason(path, st);
    return why.empty();
  };
  const std::string& root = store->root_;
  if (!open_sub(store->dir_fd_, "v1", root, &store->root_fd_)) return refuse(why);
  std::pair<const char*, int*> subs[] = {{"entries", &store->entries_fd_},
                                         {"locks", &store->locks_fd_},
                                         {"tmp", &store->tmp_fd_},
                                         {"quarantine", &store->quarantine_fd_}};
  for (auto& [name, fd] : subs)
    if (!open_sub(store->root_fd_, name, root + "/" + name, fd)) return refuse(why);
  // AT_EACCESS: ask about the effective uid, the one that will write.
  for (auto& [name, fd] : subs)
    if (*fd < 0 || ::faccessat(store->root_fd_, name, W_OK | X_OK, AT_EACCESS) != 0) store->read_only_ = true;
  store->cleanup();
  return store;
}

bool DiskStore::still_private(int fd, const std::string& path, DiskOp op) const {
  struct stat st;
  std::string why = ::fstat(fd, &st) != 0 ? posix_io::error_text("cannot stat " + path, errno)
                                          : unsafe_reason(path, st);
  if (why.empty()) return true;
  report(DiskError::Permission, op, why + " since the cache was opened: not using it");
  return false;
}

}  // namespace lazyjit::cache
