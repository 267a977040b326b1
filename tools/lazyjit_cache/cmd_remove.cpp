// prune, rm, clear: safe next to running processes because they only unlink
// whole files (cache/disk_store.h's rule: nothing is rewritten in place). A
// process that opened an entry keeps reading the bytes it opened; one that
// looks it up afterwards misses and compiles again. tmp/ is left alone: a tmp
// file may be a write in flight (the runtime's cleanup() removes stale ones).
// clear removes the lock files nobody holds (cache/file_lock.h: a held one is
// left to its holder, who removes it on release).
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cache/file_lock.h"
#include "tools/lazyjit_cache/cache_index.h"
#include "tools/lazyjit_cache/commands.h"
#include "tools/lazyjit_cache/text_format.h"

namespace lazyjit::cache_tool {

using nlohmann::json;

namespace {

// The .ljc first: once it is gone the entry is gone, whatever happens to .stats.
bool remove_entry(const CacheDir& cache, const std::string& key, std::string* error) {
  std::string ljc = cache.entries + "/" + key + ".ljc";
  if (::unlink(ljc.c_str()) != 0 && errno != ENOENT) {
    *error = "cannot remove " + ljc + ": " + std::strerror(errno);
    return false;
  }
  ::unlink((cache.entries + "/" + key + ".stats").c_str());
  return true;
}

}  // namespace

int cmd_prune(const Common& c, const PruneOptions& o) {
  if (o.max_size.empty() && o.older_than.empty())
    throw ToolError("lazyjit-cache prune: give --max-size and/or --older-than");
  CacheDir cache = open_cache_dir(c.dir);
  std::vector<Entry> all = scan_entries(cache);
  // Most recently used first, the order the runtime's eviction keeps.
  std::stable_sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return a.recency() > b.recency(); });
  double cutoff = o.older_than.empty() ? 0 : now_seconds() - parse_duration(o.older_than);
  uint64_t budget = o.max_size.empty() ? UINT64_MAX : parse_size(o.max_size), kept_bytes = 0, freed = 0;
  json removed = json::array();
  int failures = 0;
  for (const Entry& e : all) {
    std::string reason;
    if (e.recency() < cutoff) reason = "older than " + o.older_than;
    else if (kept_bytes + e.file_bytes > budget) reason = "over " + o.max_size;
    if (reason.empty()) {
      kept_bytes += e.file_bytes;
      continue;
    }
    std::string error;
    if (!o.dry_run && !remove_entry(cache, e.key, &error)) {
      std::fprintf(stderr, "lazyjit-cache: %s\n", printable(error).c_str());
      ++failures;
      continue;
    }
    freed += e.file_bytes;
    removed.push_back({{"key", e.key}, {"file_bytes", e.file_bytes}, {"last_used", e.recency()}, {"reason", reason}});
  }
  if (c.json) {
    json out = {{"schema", "lazyjit-cache/prune/1"}, {"dir", cache.dir}, {"dry_run", o.dry_run}, {"removed", removed},
                {"freed_bytes", freed}, {"kept", all.size() - removed.size()}, {"kept_bytes", kept_bytes}};
    std::printf("%s\n", json_text(out).c_str());
  } else {
    for (const auto& r : removed)
      std::printf("%s %s  %s  last used %s  (%s)\n", o.dry_run ? "would remove" : "removed",
                  printable(short_key(r["key"])).c_str(), human_bytes(r["file_bytes"]).c_str(),
                  format_time(r["last_used"]).c_str(), printable(r["reason"].get<std::string>()).c_str());
    std::printf("%s %zu entries (%s); kept %zu (%s)\n", o.dry_run ? "would remove" : "removed", removed.size(),
                human_bytes(freed).c_str(), all.size() - removed.size(), human_bytes(kept_bytes).c_str());
  }
  return failures ? 1 : 0;
}

int cmd_rm(const Common& c, const std::string& key) {
  CacheDir cache = open_cache_dir(c.dir);
  std::vector<Entry> all = scan_entries(cache);
  const Entry& e = find_entry(all, key);
  std::string error;
  if (!remove_entry(cache, e.key, &error)) throw ToolError("lazyjit-cache: " + error, 1);
  std::printf("removed %s (%s)\n", printable(e.key).c_str(), human_bytes(e.file_bytes).c_str());
  return 0;
}

int cmd_clear(const Common& c, bool yes) {
  CacheDir cache = open_cache_dir(c.dir);
  std::vector<Entry> all = scan_entries(cache);
  std::vector<std::string> quarantined;
  std::string qdir = cache.root + "/quarantine";
  if (DIR* d = ::opendir(qdir.c_str())) {
    while (dirent* de = ::readdir(d))
      if (de->d_name[0] != '.') quarantined.push_back(qdir + "/" + de->d_name);
    ::closedir(d);
  }
  uint64_t bytes = 0;
  for (const Entry& e : all) bytes += e.file_bytes;
  if (!yes) {
    std::printf("would remove %zu entries (%s) and %zu quarantined files from %s; run with --yes to do it\n",
                all.size(), human_bytes(bytes).c_str(), quarantined.size(), printable(cache.dir).c_str());
    return 0;
  }
  int failures = 0;
  for (const Entry& e : all) {
    std::string error;
    if (!remove_entry(cache, e.key, &error))
      std::fprintf(stderr, "lazyjit-cache: %s\n", printable(error).c_str()), ++failures;
  }
  for (const std::string& q : quarantined) ::unlink(q.c_str());
  const size_t locks = cache::FileLock::remove_unheld(cache.root + "/locks");
  std::printf("removed %zu entries (%s), %zu quarantined files and %zu lock files\n", all.size() - failures,
              human_bytes(bytes).c_str(), quarantined.size(), locks);
  return failures ? 1 : 0;
}

}  // namespace lazyjit::cache_tool
