// export and import: a cache in one file, to warm another machine.
//
// The archive is our own format rather than tar: the entries already carry
// their checksums and signatures, so a few length-prefixed records suffice,
// and no archive library joins the tool's dependencies. Little-endian:
//   "LJCARCH1"
//   u32 N
//   N times: u32 key length, key, u64 file length, the entry's .ljc bytes
//   u64 XXH64 (seed 0) of every byte before it
// .stats files are not carried: hits on one machine say nothing of another.
//
// Import checks the archive's checksum and structure, then every entry with
// cache::entry_file::decode (its key, and the secret if given), all before it
// writes any; then publishes each with cache::DiskStore::put (tmp file, fsync,
// rename), re-signing it with the importer's secret. Which entries count as
// foreign: see foreign.h. An entry the cache already holds under its key, and
// that passes the same checks there, is left as it is and counted as already
// present (a damaged or wrongly signed one is replaced).
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>
#include <variant>

#include "cache/disk_store.h"
#include "cache/entry_file.h"
#include "tools/lazyjit_cache/cache_index.h"
#include "tools/lazyjit_cache/commands.h"
#include "tools/lazyjit_cache/foreign.h"
#include "tools/lazyjit_cache/progress.h"
#include "tools/lazyjit_cache/text_format.h"

namespace lazyjit::cache_tool {

using nlohmann::json;

namespace {

constexpr char kArchiveMagic[8] = {'L', 'J', 'C', 'A', 'R', 'C', 'H', '1'};

void put_le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

struct Reader {
  std::string_view bytes;
  size_t pos = 0;
  uint64_t le(int n) {
    if (bytes.size() - pos < static_cast<size_t>(n)) throw ToolError("lazyjit-cache: archive truncated", 1);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[pos + i]);
    pos += n;
    return v;
  }
  std::string_view take(uint64_t n) {
    if (bytes.size() - pos < n) throw ToolError("lazyjit-cache: archive truncated", 1);
    std::string_view s = bytes.substr(pos, n);
    pos += n;
    return s;
  }
};

}  // namespace

int cmd_export(const Common& c, const std::string& file) {
  CacheDir cache = open_cache_dir(c.dir);
  std::vector<Entry> all = scan_entries(cache);
  std::string out(kArchiveMagic, 8);
  put_le(out, 0, 4);  // N, patched below: damaged entries are left out
  uint32_t n = 0, skipped = 0;
  Progress progress("export", all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    progress.update(i + 1);
    std::string bytes;
    try {
      bytes = read_whole_file(all[i].path);
    } catch (const ToolError&) {
      continue;  // removed since the scan
    }
    auto decoded = cache::entry_file::decode(bytes, "", all[i].key);
    if (auto* err = std::get_if<cache::entry_file::DecodeError>(&decoded)) {
      std::fprintf(stderr, "lazyjit-cache: skipping damaged %s: %s\n", printable(all[i].key).c_str(),
                   printable(err->message).c_str());
      ++skipped;
      continue;
    }
    put_le(out, all[i].key.size(), 4);
    out += all[i].key;
    put_le(out, bytes.size(), 8);
    out += bytes;
    ++n;
  }
  progress.done();
  for (int i = 0; i < 4; ++i) out[8 + i] = static_cast<char>((n >> (8 * i)) & 0xff);
  put_le(out, cache::entry_file::xxh64(out), 8);
  std::string tmp = file + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(out.data(), out.size());
    if (!f.flush()) throw ToolError("lazyjit-cache: cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) throw ToolError("lazyjit-cache: cannot write " + file);
  std::printf("exported %u entries (%s) to %s%s\n", n, human_bytes(out.size()).c_str(), file.c_str(),
              skipped ? (", skipped " + std::to_string(skipped) + " damaged").c_str() : "");
  return 0;
}

namespace {
// The cache holds a good entry under `key`: it decodes there, with the secret
// if one is given.
bool already_present(const CacheDir& cache, const std::string& key, const std::string& secret,
                     const std::set<std::string>& host) {
  std::string path = cache.entries + "/" + key + ".ljc";
  if (::access(path.c_str(), F_OK) != 0) return false;
  std::string bytes;
  try {
    bytes = read_whole_file(path);
  } catch (const ToolError&) {
    return false;
  }
  cache::entry_file::Decoded decoded;
  return admission_refusal(bytes, key, secret, /*allow_foreign=*/true, "", host, &decoded).empty();
}
}  // namespace

int cmd_import(const Common& c, const ImportOptions& o) {
  std::string bytes = read_whole_file(o.file);
  if (bytes.size() < 20 || bytes.compare(0, 8, kArchiveMagic, 8) != 0)
    throw ToolError("lazyjit-cache: " + o.file + " is not a lazyjit-cache archive");
  Reader sum{std::string_view(bytes).substr(bytes.size() - 8)};
  if (sum.le(8) != cache::entry_file::xxh64(std::string_view(bytes).substr(0, bytes.size() - 8)))
    throw ToolError("lazyjit-cache: " + o.file + " is damaged (archive checksum mismatch); nothing imported", 1);

  // All or nothing: every record is read and every entry checked before the
  // first one is written. A damaged archive (bad count, truncated record,
  // trailing bytes) or an entry that fails its checks (damaged, unsigned,
  // wrongly signed, stored under another key) writes nothing. Foreign entries
  // are not damage: they are listed as refused and the others imported
  // (--allow-foreign takes them too).
  struct Record {
    std::string key;
    std::string_view file;
    cache::entry_file::Decoded decoded;
  };
  std::vector<Record> records;
  Reader r{std::string_view(bytes).substr(0, bytes.size() - 8), 8};
  uint64_t n = r.le(4);
  try {
    for (uint64_t i = 0; i < n; ++i) {
      std::string key(r.take(r.le(4)));
      records.push_back({std::move(key), r.take(r.le(8)), {}});
    }
  } catch (const ToolError&) {
    throw ToolError("lazyjit-cache: " + o.file + " is damaged: it announces " + std::to_string(n) +
                        " entries but ends after " + std::to_string(records.size()) + "; nothing imported",
                    1);
  }
  if (r.pos != r.bytes.size())
    throw ToolError("lazyjit-cache: " + o.file + " is damaged: " + std::to_string(r.bytes.size() - r.pos) +
                        " bytes after its last entry; nothing imported",
                    1);

  std::set<std::string> host = host_cpu_flags();
  json imported = json::array(), refused = json::array(), present = json::array();
  std::vector<const Record*> take;
  bool damaged = false;
  Progress check("check", records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    check.update(i + 1);
    Record& rec = records[i];
    std::string why = admission_refusal(rec.file, rec.key, o.secret, o.allow_foreign, o.expect_fingerprint, host,
                                        &rec.decoded);
    if (why.empty()) {
      take.push_back(&rec);
      continue;
    }
    damaged = damaged || why.rfind("foreign:", 0) != 0;
    refused.push_back({{"key", rec.key}, {"reason", why}});
  }
  check.done();

  CacheDir cache = open_cache_dir(c.dir, /*may_be_missing=*/true);
  if (!damaged) {
    std::string put_error;
    auto store = open_writable_store(cache, o.secret, &put_error);
    Progress progress("import", take.size());
    for (size_t i = 0; i < take.size(); ++i) {
      progress.update(i + 1);
      const Record& rec = *take[i];
      if (already_present(cache, rec.key, o.secret, host)) {
        present.push_back(rec.key);
        continue;
      }
      try {
        put_error.clear();
        if (!store->put(rec.key, std::string(rec.decoded.manifest), std::string(rec.decoded.payload))) {
          refused.push_back({{"key", rec.key}, {"reason", "not written: " + put_error}});
          continue;
        }
      } catch (const std::invalid_argument& e) {  // a bad key name
        refused.push_back({{"key", rec.key}, {"reason", e.what()}});
        continue;
      }
      imported.push_back(rec.key);
    }
    progress.done();
  }
  if (c.json) {
    json out = {{"schema", "lazyjit-cache/import/1"}, {"dir", cache.dir}, {"imported", imported},
                {"already_present", present}, {"refused", refused}, {"complete", !damaged}};
    std::printf("%s\n", json_text(out).c_str());
  } else {
    for (const auto& x : refused)
      std::printf("refused %s: %s\n", printable(x["key"].get<std::string>()).c_str(),
                  printable(x["reason"].get<std::string>()).c_str());
    if (damaged)
      std::printf("nothing imported into %s: %zu of %zu entries failed their checks\n", printable(cache.dir).c_str(),
                  refused.size(), records.size());
    else
      std::printf("imported %zu new, %zu already present, into %s; refused %zu\n", imported.size(), present.size(),
                  printable(cache.dir).c_str(), refused.size());
  }
  return refused.empty() ? 0 : 1;
}

}  // namespace lazyjit::cache_tool
