// stats: what the cache holds and what it has saved.
//
// Hit ratio = hits / (hits + entries). Each entry was written after one miss
// (its compile), and each hit is a process that loaded it instead of
// compiling, so this is the share of disk lookups that found their program,
// counting only entries still in the cache (evicted entries and their hits
// are gone, and lookups for programs never stored are not recorded).
//
// Like `ccache -s`, it says the size limit the runtime evicts at
// (LAZYJIT_CACHE_MAX_BYTES, 2G by default) and what `prune --max-size` at that
// limit would free: the least recently used entries past it.
#include <algorithm>
#include <cstdlib>
#include <map>

#include "env/env.h"
#include "tools/lazyjit_cache/cache_index.h"
#include "tools/lazyjit_cache/commands.h"
#include "tools/lazyjit_cache/text_format.h"

namespace lazyjit::cache_tool {

using nlohmann::json;

int cmd_stats(const Common& c, int top) {
  CacheDir cache = open_cache_dir(c.dir);
  std::vector<Entry> all = scan_entries(cache);
  struct Site {
    int64_t entries = 0, hits = 0;
    double compile_ms = 0, saved_ms = 0;
  };
  std::map<std::string, Site> sites;
  uint64_t bytes = 0;
  int64_t hits = 0, unreadable = 0;
  double compile_ms = 0, saved_ms = 0;
  std::vector<const Entry*> never;
  for (const Entry& e : all) {
    bytes += e.file_bytes;
    if (!e.problem.empty()) {
      ++unreadable;
      continue;
    }
    hits += e.hits;
    compile_ms += e.compile_ms();
    saved_ms += e.hits * e.compile_ms();
    if (e.hits == 0) never.push_back(&e);
    Site& s = sites[e.site().empty() ? "(unknown)" : e.site()];
    ++s.entries, s.hits += e.hits, s.compile_ms += e.compile_ms(), s.saved_ms += e.hits * e.compile_ms();
  }
  // The runtime's limit, and what prune at it would remove (cmd_remove.cpp's
  // rule: most recently used first, each entry kept while it fits).
  uint64_t max_bytes = 2ull << 30;
  std::string limit_from = "default";
  if (std::string limit = env::get("LAZYJIT_CACHE_MAX_BYTES"); !limit.empty()) {
    try {
      max_bytes = parse_size(limit);
      limit_from = "LAZYJIT_CACHE_MAX_BYTES";
    } catch (const ToolError&) {
      limit_from = "default; LAZYJIT_CACHE_MAX_BYTES is not a size";
    }
  }
  std::vector<const Entry*> by_recency;
  for (const Entry& e : all) by_recency.push_back(&e);
  std::stable_sort(by_recency.begin(), by_recency.end(),
                   [](const Entry* a, const Entry* b) { return a->recency() > b->recency(); });
  uint64_t kept_bytes = 0, reclaimable = 0;
  int64_t reclaimable_entries = 0;
  for (const Entry* e : by_recency) {
    if (kept_bytes + e->file_bytes > max_bytes) reclaimable += e->file_bytes, ++reclaimable_entries;
    else kept_bytes += e->file_bytes;
  }
  int64_t readable = static_cast<int64_t>(all.size()) - unreadable;
  double ratio = hits + readable > 0 ? double(hits) / double(hits + readable) : 0;
  std::vector<std::pair<std::string, Site>> ranked(sites.begin(), sites.end());
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.second.compile_ms > b.second.compile_ms; });
  if (top >= 0 && ranked.size() > static_cast<size_t>(top)) ranked.resize(top);

  if (c.json) {
    json site_rows = json::array(), never_keys = json::array();
    for (const auto& [name, s] : ranked)
      site_rows.push_back({{"site", name}, {"entries", s.entries}, {"compile_ms", s.compile_ms}, {"hits", s.hits},
                           {"saved_ms", s.saved_ms}});
    for (const Entry* e : never) never_keys.push_back(e->key);
    json out = {{"schema", "lazyjit-cache/stats/1"}, {"dir", cache.dir},        {"entries", all.size()},
                {"unreadable", unreadable},          {"bytes", bytes},          {"hits", hits},
                {"hit_ratio", ratio},                {"compile_ms", compile_ms}, {"saved_ms", saved_ms},
                {"never_hit", never_keys},           {"top_sites", site_rows},
                {"max_bytes", max_bytes},            {"reclaimable_bytes", reclaimable},
                {"reclaimable_entries", reclaimable_entries}, {"misses", readable}};
    std::printf("%s\n", json_text(out).c_str());
    return 0;
  }
  std::printf("cache         %s\n", printable(cache.dir).c_str());
  std::printf("entries       %zu (%lld unreadable)\n", all.size(), (long long)unreadable);
  std::printf("size          %s of a %s limit (%.1f%%; %s)\n", human_bytes(bytes).c_str(), human_bytes(max_bytes).c_str(),
              max_bytes ? 100.0 * double(bytes) / double(max_bytes) : 100.0, limit_from.c_str());
  if (reclaimable_entries == 0)
    std::printf("reclaimable   0 B (everything fits the limit; prune --older-than frees entries unused for long)\n");
  else
    std::printf("reclaimable   %s in %lld least recently used entries past the limit (lazyjit-cache prune --max-size %llu)\n",
                human_bytes(reclaimable).c_str(), (long long)reclaimable_entries, (unsigned long long)max_bytes);
  std::printf("hits served   %lld (programs loaded from here instead of compiled)\n", (long long)hits);
  std::printf("misses        %lld (the compiles that wrote the entries here)\n", (long long)readable);
  std::printf("hit rate      %.1f%%  (hits / (hits + misses))\n", 100 * ratio);
  std::printf("compile time  %s ms to build what is cached\n", format_ms(compile_ms).c_str());
  std::printf("saved         %s ms of compiling by hits (sum of hits x compile ms)\n", format_ms(saved_ms).c_str());
  std::printf("never hit     %zu entries\n", never.size());
  std::printf("\ntop call sites by compile time\n");
  Table t;
  t.headers = {"SITE", "ENTRIES", "COMPILE MS", "HITS", "SAVED MS"};
  t.right = {false, true, true, true, true};
  t.width = terminal_width();
  t.min_width = {24, 0, 0, 0, 0};
  t.cut_left = {true, false, false, false, false};
  for (const auto& [name, s] : ranked)
    t.rows.push_back({name, std::to_string(s.entries), format_ms(s.compile_ms), std::to_string(s.hits),
                      format_ms(s.saved_ms)});
  t.print(stdout);
  if (!never.empty()) {
    std::printf("\nnever hit\n");
    for (size_t i = 0; i < never.size() && i < 20; ++i)
      std::printf("  %s  %s\n", printable(short_key(never[i]->key)).c_str(),
                  cut_left(printable(never[i]->site()), std::max<size_t>(24, terminal_width() - 30)).c_str());
    if (never.size() > 20) std::printf("  ... and %zu more (--json lists all)\n", never.size() - 20);
  }
  return 0;
}

}  // namespace lazyjit::cache_tool
