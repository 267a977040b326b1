#include "tools/lazyjit_cache/cache_index.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cache/cache_dir.h"
#include "cache/entry_file.h"
#include "cache/posix_io.h"
#include "env/env.h"
#include "formats/manifest.h"

namespace lazyjit::cache_tool {
namespace entry_file = lazyjit::cache::entry_file;

using nlohmann::json;

namespace {

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

uint64_t le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Header and manifest only; the payload is left unread.
void read_manifest(Entry& e) {
  int fd = cache::posix_io::open_regular(e.path, O_RDONLY);
  if (fd < 0) {
    e.problem = errno == cache::posix_io::kNotRegular
                    ? cache::posix_io::file_type_name(e.path) + ", not a regular file"
                    : std::string("cannot open: ") + std::strerror(errno);
    return;
  }
  struct stat st;
  unsigned char header[entry_file::kHeaderBytes];
  if (::fstat(fd, &st) != 0 || ::pread(fd, header, sizeof header, 0) != (ssize_t)sizeof header) {
    e.problem = "shorter than its header";
    ::close(fd);
    return;
  }
  e.file_bytes = st.st_size;
  e.mtime = st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
  uint64_t m = le(header + 12, 4), p = le(header + 16, 8);
  if (std::memcmp(header, entry_file::kMagic, 8) != 0) {
    e.problem = "not a lazyjit cache entry (bad magic)";
  } else if (le(header + 8, 4) != entry_file::kVersion) {
    e.problem = "entry format version " + std::to_string(le(header + 8, 4));
  } else if (m > e.file_bytes || p > e.file_bytes || entry_file::kHeaderBytes + m + p + 9 > e.file_bytes) {
    e.problem = "lengths do not fit the file (truncated?)";
  } else {
    std::string text(m, '\0');
    if (::pread(fd, text.data(), m, entry_file::kHeaderBytes) != (ssize_t)m) {
      e.problem = "manifest unreadable";
    } else {
      e.manifest = formats::parse_manifest(text, &e.problem);
    }
  }
  ::close(fd);
}

void read_stats(Entry& e, const std::string& path) {
  int fd = cache::posix_io::open_regular(path, O_RDONLY);
  if (fd < 0) return;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return;
  json s = json::parse(std::string(buf, n), nullptr, false);
  if (!s.is_object()) return;
  // Typed reads: a float out of int64_t's range would be undefined to convert.
  if (s.contains("hits") && s["hits"].is_number_unsigned() && s["hits"].get<uint64_t>() <= uint64_t(INT64_MAX))
    e.hits = s["hits"].get<int64_t>();
  if (s.contains("last_used") && s["last_used"].is_number()) e.last_used = s["last_used"].get<double>();
}

}  // namespace

CacheDir open_cache_dir(const std::string& flag, bool may_be_missing) {
  CacheDir c;
  if (!flag.empty()) {
    c.dir = flag, c.source = "--dir";
  } else if (cache::CacheDirChoice d = cache::default_cache_dir(env::get); !d.dir.empty()) {
    c.dir = d.dir, c.source = d.source;
  } else {
    throw ToolError("lazyjit-cache: no cache directory: pass --dir or set LAZYJIT_CACHE_DIR");
  }
  c.root = c.dir + "/v1";
  c.entries = c.root + "/entries";
  if (may_be_missing) return c;
  std::string where = c.dir + " (from " + c.source + ")";
  if (::access(c.dir.c_str(), F_OK) != 0)
    throw ToolError("lazyjit-cache: no cache directory at " + where);
  if (!is_dir(c.dir)) throw ToolError("lazyjit-cache: " + where + " is not a directory");
  if (::access(c.dir.c_str(), R_OK | X_OK) != 0)
    throw ToolError("lazyjit-cache: cannot read " + where + ": " + std::strerror(errno));
  if (!is_dir(c.entries))
    throw ToolError("lazyjit-cache: " + where + " is not a lazyjit cache (no v1/entries/ in it)");
  if (::access(c.entries.c_str(), R_OK | X_OK) != 0)
    throw ToolError("lazyjit-cache: cannot read " + c.entries + ": " + std::strerror(errno));
  return c;
}

std::vector<Entry> scan_entries(const CacheDir& cache) {
  std::vector<Entry> out;
  DIR* d = ::opendir(cache.entries.c_str());
  if (!d) throw ToolError("lazyjit-cache: cannot list " + cache.entries + ": " + std::strerror(errno));
  while (dirent* de = ::readdir(d)) {
    std::string name = de->d_name;
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".ljc") != 0 || name[0] == '.') continue;
    Entry e;
    e.key = name.substr(0, name.size() - 4);
    e.path = cache.entries + "/" + name;
    out.push_back(std::move(e));
  }
  ::closedir(d);
  for (Entry& e : out) {
    read_manifest(e);
    read_stats(e, cache.entries + "/" + e.key + ".stats");
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.key < b.key; });
  return out;
}

double Entry::created() const {
  if (manifest.is_object() && manifest.contains("created") && manifest["created"].is_number())
    return manifest["created"].get<double>();
  return mtime;
}

double Entry::compile_ms() const {
  if (manifest.is_object() && manifest.contains("compile_ms") && manifest["compile_ms"].is_number())
    return manifest["compile_ms"].get<double>();
  return 0;
}

std::string Entry::site() const {
  return manifest.is_object() ? manifest.value("site", std::string()) : std::string();
}

std::string Entry::kind() const {
  return manifest.is_object() ? manifest.value("kind", std::string("?")) : std::string("?");
}

int64_t Entry::ops() const {
  return manifest.is_object() ? manifest.value("ops", int64_t{0}) : 0;
}

nlohmann::json entry_summary(const Entry& e) {
  const json& m = e.manifest;
  auto field = [&](const char* name) { return m.is_object() && m.contains(name) ? m[name] : json(nullptr); };
  json inputs = field("inputs"), outputs = field("outputs");
  return json{{"key", e.key},
              {"short_key", short_key(e.key)},
              {"kind", e.kind()},
              {"created", e.created()},
              {"last_used", e.last_used > 0 ? json(e.last_used) : json(nullptr)},
              {"hits", e.hits},
              {"compile_ms", e.compile_ms()},
              {"file_bytes", e.file_bytes},
              {"ops", e.ops()},
              {"kernels", field("kernels")},
              {"site", e.site()},
              {"inputs", inputs.is_array() ? inputs : json::array()},
              {"outputs", outputs.is_array() ? outputs : json::array()},
              {"problem", e.problem.empty() ? json(nullptr) : json(e.problem)}};
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

std::vector<std::string> split_dashes(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dash; (dash = s.find('-', start)) != std::string::npos; start = dash + 1)
    parts.push_back(s.substr(start, dash - start));
  parts.push_back(s.substr(start));
  return parts;
}

std::string short_key(const std::string& key) {
  std::vector<std::string> parts = split_dashes(key);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "-" : "") + parts[i].substr(0, 8);
  return out;
}

bool key_matches(const std::string& key, const std::string& query) {
  if (key.rfind(query, 0) == 0) return true;
  std::vector<std::string> k = split_dashes(key), q = split_dashes(query);
  if (q.size() < 2 || q.size() > k.size()) return false;
  for (size_t i = 0; i < q.size(); ++i)
    if (k[i].rfind(q[i], 0) != 0) return false;
  return true;
}

const Entry& find_entry(const std::vector<Entry>& entries, const std::string& prefix) {
  std::vector<const Entry*> hits;
  for (const Entry& e : entries)
    if (e.key == prefix) return e;
    else if (key_matches(e.key, prefix)) hits.push_back(&e);
  if (hits.size() == 1) return *hits[0];
  if (hits.size() > 1) {
    std::string m = "lazyjit-cache: key prefix '" + prefix + "' matches " + std::to_string(hits.size()) +
                    " entries; give more of the key:";
    for (size_t i = 0; i < hits.size() && i < 5; ++i) m += "\n  " + hits[i]->key;
    throw ToolError(m);
  }
  if (entries.empty()) throw ToolError("lazyjit-cache: no entry '" + prefix + "': the cache is empty");
  // Compare against the key's first |prefix| characters too, so a short
  // mistyped prefix still finds its entry.
  const Entry* best = nullptr;
  size_t best_d = SIZE_MAX;
  for (const Entry& e : entries) {
    size_t d = std::min(edit_distance(prefix, e.key), edit_distance(prefix, e.key.substr(0, prefix.size())));
    if (d < best_d) best_d = d, best = &e;
  }
  throw ToolError("lazyjit-cache: no entry '" + prefix + "'; did you mean " + best->key + "?");
}

std::string read_whole_file(const std::string& path) {
  int fd = cache::posix_io::open_regular(path, O_RDONLY);
  if (fd < 0 && errno == cache::posix_io::kNotRegular)
    throw ToolError("lazyjit-cache: " + path + " is " + cache::posix_io::file_type_name(path) +
                    ", not a regular file: refused without reading it");
  if (fd < 0) throw ToolError("lazyjit-cache: cannot open " + path + ": " + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw ToolError("lazyjit-cache: cannot read " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, n);
  }
  ::close(fd);
  return out;
}

std::unique_ptr<cache::DiskStore> open_writable_store(const CacheDir& cache, const std::string& secret,
                                                      std::string* put_error) {
  std::string warning;
  auto store = cache::DiskStore::open(cache::DiskStoreOptions{cache.dir, 2ull << 30, secret}, &warning);
  if (!store) throw ToolError("lazyjit-cache: cannot open " + cache.dir + ": " + warning);
  if (store->read_only()) throw ToolError("lazyjit-cache: " + cache.dir + " is read-only");
  store->on_error = [put_error](cache::DiskError, cache::DiskOp, const std::string& m) { *put_error = m; };
  return store;
}

}  // namespace lazyjit::cache_tool
