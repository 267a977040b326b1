// verify: every entry read in full and checked as the runtime would check it
// (cache::entry_file::decode: header, lengths, XXH64, signature when a secret
// is given, manifest payload fields), plus the program payload's own trailing
// checksum (lowering/program_bytes.cpp), the manifest's kind and key, and that
// the manifest is one the tool can read (formats/manifest.h).
#include <sys/stat.h>
#include <unistd.h>

#include <variant>

#include "cache/disk_store.h"
#include "cache/entry_file.h"
#include "graph_ir/hash.h"
#include "formats/manifest.h"
#include "tools/lazyjit_cache/cache_index.h"
#include "tools/lazyjit_cache/commands.h"
#include "tools/lazyjit_cache/progress.h"
#include "tools/lazyjit_cache/text_format.h"

namespace lazyjit::cache_tool {

using nlohmann::json;

namespace {

struct Bad {
  std::string key, kind, message;
  cache::DiskError error = cache::DiskError::Corrupt;
  bool quarantined = false;
};

// Empty when the entry is fine.
std::optional<Bad> check(const Entry& e, const std::string& secret) {
  std::string file;
  try {
    file = read_whole_file(e.path);
  } catch (const ToolError& err) {
    if (::access(e.path.c_str(), F_OK) != 0) return std::nullopt;  // removed since the scan: not damage
    struct stat st;
    if (::lstat(e.path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      return Bad{e.key, "not_a_file", err.what(), cache::DiskError::NotAFile};
    return Bad{e.key, "io", err.what(), cache::DiskError::Io};
  }
  auto decoded = cache::entry_file::decode(file, secret, e.key);
  if (auto* err = std::get_if<cache::entry_file::DecodeError>(&decoded))
    return Bad{e.key, cache::disk_error_name(err->kind), err->message, err->kind};
  const auto& d = std::get<cache::entry_file::Decoded>(decoded);
  // Checksummed is not well formed: a manifest the tool's commands cannot
  // read (nested too deep, a field of the wrong type) is damage.
  std::string problem;
  json m = formats::parse_manifest(d.manifest, &problem);
  if (!m.is_object()) return Bad{e.key, "corrupt", problem, cache::DiskError::Corrupt};
  if (m.value("kind", "") != "program")
    return Bad{e.key, "foreign", "manifest kind is not \"program\"", cache::DiskError::Foreign};
  std::string_view p = d.payload;
  uint64_t sum = 0;
  for (int i = 7; p.size() >= 8 && i >= 0; --i) sum = (sum << 8) | static_cast<unsigned char>(p[p.size() - 8 + i]);
  if (p.size() < 8 || sum != ir::hash64(p.data(), p.size() - 8))
    return Bad{e.key, "corrupt", "program payload checksum mismatch", cache::DiskError::Corrupt};
  return std::nullopt;
}

}  // namespace

int cmd_verify(const Common& c, const VerifyOptions& o) {
  CacheDir cache = open_cache_dir(c.dir);
  std::vector<Entry> all = scan_entries(cache);
  std::vector<Bad> bad;
  Progress progress("verify", all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    if (auto b = check(all[i], o.secret)) bad.push_back(*b);
    progress.update(i + 1);
  }
  progress.done();

  if (o.quarantine && !bad.empty()) {
    std::string warning;
    auto store = cache::DiskStore::open(cache::DiskStoreOptions{cache.dir, ~0ull, o.secret}, &warning);
    if (!store) throw ToolError("lazyjit-cache: cannot quarantine: " + warning);
    if (store->read_only()) throw ToolError("lazyjit-cache: cannot quarantine: " + cache.dir + " is read-only");
    for (Bad& b : bad) {
      // reject() moves the file to quarantine/<key>.<kind>.<ns>.<random>.ljc
      // by rename, like the runtime does with an entry it refuses.
      store->reject(b.key, b.error, b.message);
      b.quarantined = ::access((cache.entries + "/" + b.key + ".ljc").c_str(), F_OK) != 0;
    }
  }

  if (c.json) {
    json rows = json::array();
    for (const Bad& b : bad)
      rows.push_back({{"key", b.key}, {"kind", b.kind}, {"message", b.message}, {"quarantined", b.quarantined}});
    json out = {{"schema", "lazyjit-cache/verify/1"}, {"dir", cache.dir}, {"checked", all.size()},
                {"signatures_checked", !o.secret.empty()}, {"healthy", bad.empty()}, {"bad", rows}};
    std::printf("%s\n", json_text(out).c_str());
  } else {
    for (const Bad& b : bad)
      std::printf("BAD  %s  %s: %s%s\n", printable(b.key).c_str(), b.kind.c_str(), printable(b.message).c_str(),
                  b.quarantined ? " (quarantined)" : "");
    std::printf("%zu entries checked%s: %s\n", all.size(), o.secret.empty() ? " (no secret: signatures not checked)" : "",
                bad.empty() ? "healthy" : (std::to_string(bad.size()) + " bad").c_str());
  }
  return bad.empty() ? 0 : 1;
}

}  // namespace lazyjit::cache_tool
