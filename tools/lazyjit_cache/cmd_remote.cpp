// remote ls, push and pull: the compile cache's remote tier on Redis.
//
// Values on the server are entry files byte for byte (cache/redis_store.h),
// so push sends a local entry's file as it is and pull writes what it fetched
// as it is, after checking it the way the runtime does: checksum, signature
// (a secret is required: the runtime loads only signed entries from a
// remote), and that this CPU can run it (foreign.h). ls reads each entry's
// header and manifest only, not its payload, and checks nothing.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <variant>

#include "cache/disk_store.h"
#include "cache/entry_file.h"
#include "cache/redis_store.h"
#include "formats/manifest.h"
#include "tools/lazyjit_cache/cache_index.h"
#include "tools/lazyjit_cache/commands.h"
#include "tools/lazyjit_cache/foreign.h"
#include "tools/lazyjit_cache/progress.h"
#include "tools/lazyjit_cache/text_format.h"

namespace lazyjit::cache_tool {

using nlohmann::json;
namespace entry_file = cache::entry_file;

namespace {

cache::RedisStoreOptions store_options(const RemoteOptions& o) {
  cache::RedisStoreOptions opts;
  if (o.remote.empty())
    throw ToolError("lazyjit-cache: no remote: pass --remote redis://host:port/db or set LAZYJIT_REMOTE_CACHE");
  std::string why;
  if (!cache::RedisUrl::parse(o.remote, &opts.url, &why))
    throw ToolError("lazyjit-cache: --remote is not a redis://host:port/db URL: " + why);
  opts.timeout = std::chrono::milliseconds(o.timeout_ms);
  return opts;
}

uint64_t max_entry_bytes(const RemoteOptions& o) { return o.max_entry_bytes.empty() ? 64ull << 20 : parse_size(o.max_entry_bytes); }

void need_secret(const RemoteOptions& o, const char* what) {
  if (o.secret.empty())
    throw ToolError(std::string("lazyjit-cache: remote ") + what +
                    " needs a secret (--secret or LAZYJIT_CACHE_SECRET): the runtime loads only entries signed with "
                    "it from a remote");
}

void check(const cache::RemoteStatus& s) {
  if (!s.ok()) throw ToolError("lazyjit-cache: " + s.message);
}

// "znver3, llvm 19.1.7, lazyjit 0.1.0" from the manifest's target.
std::string target_text(const json& m) {
  if (!m.is_object()) return "";
  if (m.contains("target") && m["target"].is_object()) {
    const json& t = m["target"];
    std::string s = t.value("cpu", std::string("?"));
    if (t.contains("llvm")) s += ", llvm " + t.value("llvm", std::string());
    if (t.contains("lazyjit")) s += ", lazyjit " + t.value("lazyjit", std::string());
    return s;
  }
  return m.value("code_fingerprint", std::string());
}

// An Entry (cache_index.h) from a remote key's size, header and manifest.
Entry remote_entry(const std::string& key, const cache::RedisStore::Head& h) {
  Entry e;
  e.key = key;
  e.file_bytes = h.size;
  const std::string& b = h.bytes;
  auto le = [&](size_t at, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
    return v;
  };
  if (h.size == 0) e.problem = "gone (removed or evicted since it was listed)";
  else if (b.size() < entry_file::kHeaderBytes || b.compare(0, 8, entry_file::kMagic, 8) != 0)
    e.problem = "not a lazyjit cache entry (bad magic)";
  else if (le(8, 4) != entry_file::kVersion) e.problem = "entry format version " + std::to_string(le(8, 4));
  else if (le(16, 8) > h.size || entry_file::kHeaderBytes + le(12, 4) + le(16, 8) + 9 > h.size)  // no wrap-around
    e.problem = "lengths do not fit (truncated?)";
  else if (b.size() != entry_file::kHeaderBytes + le(12, 4)) e.problem = "manifest unreadable";
  else {
    e.manifest = formats::parse_manifest(std::string_view(b).substr(entry_file::kHeaderBytes), &e.problem);
  }
  return e;
}

bool local_has(const CacheDir& cache, const std::string& key) {
  return ::access((cache.entries + "/" + key + ".ljc").c_str(), F_OK) == 0;
}

}  // namespace

int cmd_remote_ls(const Common& c, const RemoteOptions& o) {
  cache::RedisStore store(store_options(o));
  std::vector<std::string> keys;
  check(store.keys(&keys));
  std::vector<cache::RedisStore::Head> heads;
  check(store.heads(keys, 64ull << 20, &heads));
  std::vector<Entry> entries;
  for (size_t i = 0; i < keys.size(); ++i) entries.push_back(remote_entry(keys[i], heads[i]));
  std::set<std::string> host = host_cpu_flags();
  uint64_t total = 0;
  for (const Entry& e : entries) total += e.file_bytes;
  if (c.json) {
    json rows = json::array();
    for (const Entry& e : entries) {
      json r = entry_summary(e);
      r.erase("hits");
      r.erase("last_used");
      r["target"] = e.manifest.is_object() && e.manifest.contains("target") ? e.manifest["target"] : json(nullptr);
      r["code_fingerprint"] = e.manifest.is_object() ? e.manifest.value("code_fingerprint", "") : "";
      r["runs_here"] = e.problem.empty() && foreign_reason(e.manifest, "", host).empty();
      rows.push_back(r);
    }
    json out = {{"schema", "lazyjit-cache/remote-ls/1"}, {"remote", store.options().url.str()},
                {"total_bytes", total}, {"entries", rows}};
    std::printf("%s\n", json_text(out).c_str());
    return 0;
  }
  Table t;
  t.headers = {"KEY", "KIND", "CREATED", "SIZE", "OPS", "TARGET", "SITE"};
  t.right = {false, false, false, true, true, false, false};
  t.width = terminal_width();
  t.min_width = {0, 0, 0, 0, 0, 16, 24};
  t.cut_left = {false, false, false, false, false, false, true};
  t.drop = {0, 1, 2, 0, 3, 0, 0};
  for (const Entry& e : entries) {
    if (!e.problem.empty()) {
      t.whole_last.push_back(t.rows.size());
      t.rows.push_back({short_key(e.key), "?", "-", human_bytes(e.file_bytes), "-", "", "unreadable: " + e.problem});
      continue;
    }
    std::string target = target_text(e.manifest);
    if (!foreign_reason(e.manifest, "", host).empty()) target += " (not this CPU)";
    t.rows.push_back({short_key(e.key), e.kind(), format_time(e.created()), human_bytes(e.file_bytes),
                      std::to_string(e.ops()), target, e.site()});
  }
  t.print(stdout);
  std::printf("%zu entries (%s) on %s\n", entries.size(), human_bytes(total).c_str(), store.options().url.str().c_str());
  return 0;
}

int cmd_remote_push(const Common& c, const RemoteOptions& o) {
  need_secret(o, "push");
  CacheDir cache = open_cache_dir(c.dir);
  std::vector<Entry> all = scan_entries(cache);
  cache::RedisStore store(store_options(o));
  const uint64_t limit = max_entry_bytes(o);
  std::vector<std::string> keys;
  for (const Entry& e : all) keys.push_back(e.key);
  std::vector<bool> there(keys.size(), false);
  if (!o.force) check(store.exists(keys, &there));
  json pushed = json::array(), present = json::array(), refused = json::array();
  uint64_t bytes_sent = 0;
  Progress progress("push", all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    progress.update(i + 1);
    const Entry& e = all[i];
    if (there[i]) {
      present.push_back(e.key);
      continue;
    }
    std::string file;
    try {
      file = read_whole_file(e.path);
    } catch (const ToolError&) {
      continue;  // removed since the scan
    }
    auto refuse = [&](const std::string& why) { refused.push_back({{"key", e.key}, {"reason", why}}); };
    if (file.size() > limit) {
      refuse("too_large: " + std::to_string(file.size()) + " bytes, over the limit of " + std::to_string(limit));
      continue;
    }
    auto decoded = entry_file::decode(file, o.secret, e.key);
    if (auto* err = std::get_if<entry_file::DecodeError>(&decoded)) {
      refuse(std::string(cache::disk_error_name(err->kind)) + ": " + err->message);
      continue;
    }
    check(store.put(e.key, file));
    bytes_sent += file.size();
    pushed.push_back(e.key);
  }
  progress.done();
  if (c.json) {
    json out = {{"schema", "lazyjit-cache/remote-push/1"}, {"dir", cache.dir}, {"remote", store.options().url.str()},
                {"pushed", pushed}, {"present", present}, {"refused", refused}, {"bytes", bytes_sent}};
    std::printf("%s\n", json_text(out).c_str());
  } else {
    for (const auto& x : refused)
      std::printf("refused %s: %s\n", printable(x["key"].get<std::string>()).c_str(),
                  printable(x["reason"].get<std::string>()).c_str());
    std::printf("pushed %zu entries (%s) to %s, %zu already there, refused %zu\n", pushed.size(),
                human_bytes(bytes_sent).c_str(), store.options().url.str().c_str(), present.size(), refused.size());
  }
  return refused.empty() ? 0 : 1;
}

int cmd_remote_pull(const Common& c, const RemoteOptions& o) {
  need_secret(o, "pull");
  CacheDir cache = open_cache_dir(c.dir, /*may_be_missing=*/true);
  cache::RedisStore store(store_options(o));
  const uint64_t limit = max_entry_bytes(o);
  std::vector<std::string> keys;
  check(store.keys(&keys));
  std::string put_error;
  auto disk = open_writable_store(cache, o.secret, &put_error);

  std::set<std::string> host = host_cpu_flags();
  json pulled = json::array(), present = json::array(), refused = json::array();
  uint64_t bytes_got = 0;
  Progress progress("pull", keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    progress.update(i + 1);
    const std::string& key = keys[i];
    auto refuse = [&](const std::string& why) { refused.push_back({{"key", key}, {"reason", why}}); };
    if (!o.force && local_has(cache, key)) {
      present.push_back(key);
      continue;
    }
    cache::RemoteStatus s;
    std::optional<std::string> file = store.get(key, limit, &s);
    if (s.error == cache::RemoteError::TooLarge) {
      refuse("too_large: over the limit of " + std::to_string(limit) + " bytes");
      continue;
    }
    check(s);
    if (!file) continue;  // removed since the listing
    entry_file::Decoded d;
    if (std::string why = admission_refusal(*file, key, o.secret, o.allow_foreign, o.expect_fingerprint, host, &d);
        !why.empty()) {
      refuse(why);
      continue;
    }
    try {
      put_error.clear();
      if (!disk->put_file(key, *file)) {
        refuse("not written: " + put_error);
        continue;
      }
    } catch (const std::invalid_argument& e) {  // a key that is no safe file name
      refuse(e.what());
      continue;
    }
    bytes_got += file->size();
    pulled.push_back(key);
  }
  progress.done();
  if (c.json) {
    json out = {{"schema", "lazyjit-cache/remote-pull/1"}, {"dir", cache.dir}, {"remote", store.options().url.str()},
                {"pulled", pulled}, {"present", present}, {"refused", refused}, {"bytes", bytes_got}};
    std::printf("%s\n", json_text(out).c_str());
  } else {
    for (const auto& x : refused)
      std::printf("refused %s: %s\n", printable(x["key"].get<std::string>()).c_str(),
                  printable(x["reason"].get<std::string>()).c_str());
    std::printf("pulled %zu entries (%s) from %s into %s, %zu already here, refused %zu\n", pulled.size(),
                human_bytes(bytes_got).c_str(), store.options().url.str().c_str(), printable(cache.dir).c_str(), present.size(),
                refused.size());
  }
  return refused.empty() ? 0 : 1;
}

}  // namespace lazyjit::cache_tool
