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
// Import checks the archive's checksum, then every entry with
// cache::entry_file::decode (and the secret, if given), and publishes it with
// cache::DiskStore::put (tmp file, fsync, rename), re-signing it with the
// importer's secret. Which entries count as foreign: see foreign.h.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
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
    auto decoded = cache::entry_file::decode(bytes, "");
    if (auto* err = std::get_if<cache::entry_file::DecodeError>(&decoded)) {
      std::fprintf(stderr, "lazyjit-cache: skipping damaged %s: %s\n", all[i].key.c_str(), err->message.c_str());
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

int cmd_import(const Common& c, const ImportOptions& o) {
  std::string bytes = read_whole_file(o.file);
  if (bytes.size() < 20 || bytes.compare(0, 8, kArchiveMagic, 8) != 0)
    throw ToolError("lazyjit-cache: " + o.file + " is not a lazyjit-cache archive");
  Reader sum{std::string_view(bytes).substr(bytes.size() - 8)};
  if (sum.le(8) != cache::entry_file::xxh64(std::string_view(bytes).substr(0, bytes.size() - 8)))
    throw ToolError("lazyjit-cache: " + o.file + " is damaged (archive checksum mismatch)", 1);
  Reader r{std::string_view(bytes).substr(0, bytes.size() - 8), 8};
  uint64_t n = r.le(4);

  CacheDir cache = open_cache_dir(c.dir, /*may_be_missing=*/true);
  std::string put_error;
  auto store = open_writable_store(cache, o.secret, &put_error);

  std::set<std::string> host = host_cpu_flags();
  json imported = json::array(), refused = json::array();
  Progress progress("import", n);
  for (uint64_t i = 0; i < n; ++i) {
    std::string key(r.take(r.le(4)));
    std::string_view file = r.take(r.le(8));
    progress.update(i + 1);
    auto refuse = [&](const std::string& why) { refused.push_back({{"key", key}, {"reason", why}}); };
    cache::entry_file::Decoded d;
    if (std::string why = admission_refusal(file, o.secret, o.allow_foreign, o.expect_fingerprint, host, &d);
        !why.empty()) {
      refuse(why);
      continue;
    }
    try {
      put_error.clear();
      if (!store->put(key, std::string(d.manifest), std::string(d.payload))) {
        refuse("not written: " + put_error);
        continue;
      }
    } catch (const std::invalid_argument& e) {  // a bad key name
      refuse(e.what());
      continue;
    }
    imported.push_back(key);
  }
  progress.done();
  if (c.json) {
    json out = {{"schema", "lazyjit-cache/import/1"}, {"dir", cache.dir}, {"imported", imported}, {"refused", refused}};
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    for (const auto& x : refused)
      std::printf("refused %s: %s\n", x["key"].get<std::string>().c_str(), x["reason"].get<std::string>().c_str());
    std::printf("imported %zu entries into %s, refused %zu\n", imported.size(), cache.dir.c_str(), refused.size());
  }
  return refused.empty() ? 0 : 1;
}

}  // namespace lazyjit::cache_tool
