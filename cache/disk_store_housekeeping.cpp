// DiskStore's bookkeeping beside get/put: hit statistics, LRU eviction, and
// removal of what crashed writers and quarantine leave behind.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cache/disk_store.h"
#include "cache/posix_io.h"

namespace lazyjit::cache {
namespace {

constexpr double kTmpMaxAgeSeconds = 60;
constexpr double kQuarantineMaxAgeSeconds = 24 * 3600;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The .stats JSON, or an empty object if missing or unreadable: stats are hints.
// A FIFO or device in its place is skipped without blocking.
nlohmann::json read_stats(int dir_fd, const std::string& name) {
  int fd = posix_io::open_regular_at(dir_fd, name, O_RDONLY);
  if (fd < 0) return nlohmann::json::object();
  std::string text;
  bool ok = posix_io::read_all(fd, &text);
  ::close(fd);
  if (!ok) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : nlohmann::json::object();
}

// Parses "<name>.<pid>.<random>.tmp" from the right (keys may hold dots); 0 if not that shape.
pid_t writer_pid(const std::string& name) {
  if (!ends_with(name, ".tmp")) return 0;
  size_t rnd = name.rfind('.', name.size() - 5);
  if (rnd == std::string::npos || rnd == 0) return 0;
  size_t pid = name.rfind('.', rnd - 1);
  if (pid == std::string::npos) return 0;
  return static_cast<pid_t>(std::atol(name.substr(pid + 1, rnd - pid - 1).c_str()));
}

// A pid that does not exist here. Another pid namespace sharing the directory
// would look dead too; its put then fails to rename (reported as Io), which is
// a lost write, never a partial entry.
bool writer_gone(pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

void DiskStore::record_hit(const std::string& key) {
  check_key(key);
  if (read_only_) return;
  struct stat st;
  if (::fstatat(entries_fd_, (key + ".ljc").c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;  // evicted meanwhile: no orphan stats
  nlohmann::json stats = read_stats(entries_fd_, key + ".stats");
  uint64_t hits = stats.contains("hits") && stats["hits"].is_number_unsigned() ? stats["hits"].get<uint64_t>() : 0;
  std::string text = nlohmann::json{{"hits", hits + 1}, {"last_used", posix_io::now_seconds()}}.dump();
  std::string tmp = key + ".stats." + std::to_string(::getpid()) + "." + posix_io::random_hex() + ".tmp";
  int fd = ::openat(tmp_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  bool ok = posix_io::write_all(fd, text.data(), text.size());
  ok = ::close(fd) == 0 && ok;
  if (!ok || ::renameat(tmp_fd_, tmp.c_str(), entries_fd_, (key + ".stats").c_str()) != 0)
    ::unlinkat(tmp_fd_, tmp.c_str(), 0);
}

std::vector<DiskStore::Listed> DiskStore::list() const {
  std::vector<Listed> out;
  if (entries_fd_ < 0) return out;
  for (const std::string& name : posix_io::list_dir_at(entries_fd_)) {
    struct stat st;
    if (!ends_with(name, ".ljc") || ::fstatat(entries_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    out.push_back({name.substr(0, name.size() - 4), posix_io::mtime_seconds(st)});
  }
  return out;
}

void DiskStore::evict() { evict_lru(options_.max_bytes, 0); }

uint64_t DiskStore::evict_lru(uint64_t keep_at_most, uint64_t free_at_least) {
  if (read_only_) return 0;
  struct Entry {
    std::string key;
    uint64_t bytes;
    double last_used;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  for (const std::string& name : posix_io::list_dir_at(entries_fd_)) {
    if (!ends_with(name, ".ljc")) continue;
    struct stat st;
    if (::fstatat(entries_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    entries.push_back({name.substr(0, name.size() - 4), uint64_t(st.st_size), posix_io::mtime_seconds(st)});
    total += uint64_t(st.st_size);
  }
  uint64_t goal = std::min(keep_at_most, total - std::min(total, free_at_least));
  if (total <= goal) return 0;
  // Only now read the stats: the common case (under budget) costs one stat per entry.
  for (Entry& e : entries) {
    nlohmann::json stats = read_stats(entries_fd_, e.key + ".stats");
    if (stats.contains("last_used") && stats["last_used"].is_number())
      e.last_used = std::max(e.last_used, stats["last_used"].get<double>());
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.key < b.key;
  });
  // Unlinking under a reader is safe: its open descriptor keeps the bytes.
  uint64_t freed = 0;
  for (const Entry& e : entries) {
    if (total <= goal) break;
    // ENOENT: another process evicted it first (and freed its bytes).
    if (::unlinkat(entries_fd_, (e.key + ".ljc").c_str(), 0) == 0) freed += e.bytes;
    ::unlinkat(entries_fd_, (e.key + ".stats").c_str(), 0);
    total -= e.bytes;
  }
  return freed;
}

void DiskStore::cleanup() {
  if (read_only_) return;
  double now = posix_io::now_seconds();
  auto sweep = [&](int dir_fd, auto&& stale) {
    for (const std::string& name : posix_io::list_dir_at(dir_fd)) {
      struct stat st;
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode)) continue;
      if (stale(name, now - posix_io::mtime_seconds(st))) ::unlinkat(dir_fd, name.c_str(), 0);
    }
  };
  sweep(tmp_fd_, [](const std::string& name, double age) {
    return age > kTmpMaxAgeSeconds || writer_gone(writer_pid(name));
  });
  sweep(quarantine_fd_, [](const std::string&, double age) { return age > kQuarantineMaxAgeSeconds; });
  FileLock::remove_unheld(locks_fd_);
}

}  // namespace lazyjit::cache
