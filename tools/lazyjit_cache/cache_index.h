// What lazyjit-cache knows of a cache directory: where it is, and one Entry per
// entries/<key>.ljc with its manifest and its .stats. Reading never writes, so
// every read command is safe next to running processes; an entry that vanishes
// or is half-readable mid-scan becomes an Entry with a `problem`, never a crash.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/disk_store.h"

namespace lazyjit::cache_tool {

// A failure the user must fix (bad dir, unknown key, bad flag): the message is
// printed as is and the tool exits with `exit_code` (2: usage or directory).
struct ToolError : std::runtime_error {
  explicit ToolError(const std::string& m, int code = 2) : std::runtime_error(m), exit_code(code) {}
  int exit_code;
};

struct CacheDir {
  std::string dir;      // as the user named it (or the default)
  std::string source;   // where the name came from: "--dir", "$LAZYJIT_CACHE_DIR", ...
  std::string root;     // dir/v1
  std::string entries;  // dir/v1/entries
};

// --dir, else $LAZYJIT_CACHE_DIR, else $XDG_CACHE_HOME/lazyjit, else
// ~/.cache/lazyjit (the runtime's rule). Throws ToolError when the directory is
// missing, unreadable or holds no v1/entries (not a lazyjit cache), unless
// `may_be_missing` (import creates the cache).
CacheDir open_cache_dir(const std::string& flag, bool may_be_missing = false);

// The cache's DiskStore, to write entries into (import, remote pull): throws
// ToolError when it cannot be opened or is read-only. A failed put leaves its
// message in *put_error.
std::unique_ptr<cache::DiskStore> open_writable_store(const CacheDir& cache, const std::string& secret,
                                                      std::string* put_error);

struct Entry {
  std::string key;   // file name without ".ljc"
  std::string path;
  uint64_t file_bytes = 0;
  double mtime = 0;
  nlohmann::json manifest;  // an object, or null when `problem` is set
  std::string problem;      // why the header or manifest could not be read
  int64_t hits = 0;         // from <key>.stats; 0 when absent
  double last_used = 0;     // 0: never hit

  double created() const;   // the manifest's "created", else the file's mtime
  double compile_ms() const;
  std::string site() const;
  std::string kind() const;
  int64_t ops() const;
  // The later of last_used and mtime: what the runtime's eviction orders by.
  double recency() const { return last_used > mtime ? last_used : mtime; }
};

// The entry as one row of `ls --json` (schema in docs/lazyjit-cache.md).
nlohmann::json entry_summary(const Entry& e);

// Every entries/*.ljc, sorted by key. Reads only the 24-byte header and the
// manifest of each file (not the payload), so it stays fast on big caches.
std::vector<Entry> scan_entries(const CacheDir& cache);

// Keys are "<structure>-<shape>-<target>" in hex. The short form keeps 8
// digits of each part ("87c7afcb-1c4b03ef-3110f6bc"): two programs that differ
// only by shape share their structure, so a plain 12-digit prefix would not
// tell them apart.
std::string short_key(const std::string& key);
// True when `query` is a prefix of `key`, or when each dash-separated part of
// `query` is a prefix of the same part of `key` (so short keys work).
bool key_matches(const std::string& key, const std::string& query);

// The one entry `prefix` matches (key_matches). Throws ToolError naming the
// closest keys when none or several match.
const Entry& find_entry(const std::vector<Entry>& entries, const std::string& prefix);

// The whole file, or throws ToolError.
std::string read_whole_file(const std::string& path);

// Levenshtein distance, for "did you mean".
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace lazyjit::cache_tool
