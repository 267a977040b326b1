// DiskStore's bookkeeping beside get/put: hit statistics, LRU eviction, and
// removal of what crashed writers and quarantine leave behind.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
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
nlohmann::json read_stats(const std::string& path) {
  int fd = posix_io::open_regular(path, O_RDONLY);
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
  std::string entry = root_ + "/entries/" + key;
  struct stat st;
  if (::stat((entry + ".ljc").c_str(), &st) != 0) return;  // evicted meanwhile: no orphan stats
  nlohmann::json stats = read_stats(entry + ".stats");
  uint64_t hits = stats.contains("hits") && stats["hits"].is_number_unsigned() ? stats["hits"].get<uint64_t>() : 0;
  std::string text = nlohmann::json{{"hits", hits + 1}, {"last_used", posix_io::now_seconds()}}.dump();
  std::string tmp =
      root_ + "/tmp/" + key + ".stats." + std::to_string(::getpid()) + "." + posix_io::random_hex() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      ::unlink(tmp.c_str());
      return;
    }
  }
  if (::rename(tmp.c_str(), (entry + ".stats").c_str()) != 0) ::unlink(tmp.c_str());
}

void DiskStore::evict() {
  if (read_only_) return;
  std::string dir = root_ + "/entries/";
  struct Entry {
    std::string key;
    uint64_t bytes;
    double last_used;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  for (const std::string& name : posix_io::list_dir(dir)) {
    if (!ends_with(name, ".ljc")) continue;
    struct stat st;
    if (::lstat((dir + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    entries.push_back({name.substr(0, name.size() - 4), uint64_t(st.st_size), posix_io::mtime_seconds(st)});
    total += uint64_t(st.st_size);
  }
  if (total <= options_.max_bytes) return;
  // Only now read the stats: the common case (under budget) costs one stat per entry.
  for (Entry& e : entries) {
    nlohmann::json stats = read_stats(dir + e.key + ".stats");
    if (stats.contains("last_used") && stats["last_used"].is_number())
      e.last_used = std::max(e.last_used, stats["last_used"].get<double>());
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.key < b.key;
  });
  // Unlinking under a reader is safe: its open descriptor keeps the bytes.
  for (const Entry& e : entries) {
    if (total <= options_.max_bytes) break;
    ::unlink((dir + e.key + ".ljc").c_str());  // ENOENT: another process evicted it first
    ::unlink((dir + e.key + ".stats").c_str());
    total -= e.bytes;
  }
}

void DiskStore::cleanup() {
  if (read_only_) return;
  double now = posix_io::now_seconds();
  auto sweep = [&](const std::string& dir, auto&& stale) {
    for (const std::string& name : posix_io::list_dir(dir)) {
      struct stat st;
      std::string path = dir + "/" + name;
      if (::lstat(path.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
      if (stale(name, now - posix_io::mtime_seconds(st))) ::unlink(path.c_str());
    }
  };
  sweep(root_ + "/tmp", [](const std::string& name, double age) {
    return age > kTmpMaxAgeSeconds || writer_gone(writer_pid(name));
  });
  sweep(root_ + "/quarantine", [](const std::string&, double age) { return age > kQuarantineMaxAgeSeconds; });
}

}  // namespace lazyjit::cache
