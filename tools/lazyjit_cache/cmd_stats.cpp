// stats: what the cache holds and what it has saved.
//
// Hit ratio = hits / (hits + entries). Each entry was written after one miss
// (its compile), and each hit is a process that loaded it instead of
// compiling, so this is the share of disk lookups that found their program,
// counting only entries still in the cache (evicted entries and their hits
// are gone, and lookups for programs never stored are not recorded).
#include <algorithm>
#include <map>

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
                {"never_hit", never_keys},           {"top_sites", site_rows}};
    std::printf("%s\n", json_text(out).c_str());
    return 0;
  }
  std::printf("cache         %s\n", printable(cache.dir).c_str());
  std::printf("entries       %zu (%lld unreadable)\n", all.size(), (long long)unreadable);
  std::printf("size          %s\n", human_bytes(bytes).c_str());
  std::printf("hits          %lld\n", (long long)hits);
  std::printf("hit ratio     %.1f%%  (hits / (hits + entries): each entry cost one miss)\n", 100 * ratio);
  std::printf("compile time  %s ms to build what is cached\n", format_ms(compile_ms).c_str());
  std::printf("saved         %s ms of compiling by hits (sum of hits x compile ms)\n", format_ms(saved_ms).c_str());
  std::printf("never hit     %zu entries\n", never.size());
  std::printf("\ntop call sites by compile time\n");
  Table t;
  t.headers = {"SITE", "ENTRIES", "COMPILE MS", "HITS", "SAVED MS"};
  t.right = {false, true, true, true, true};
  for (const auto& [name, s] : ranked)
    t.rows.push_back({name, std::to_string(s.entries), format_ms(s.compile_ms), std::to_string(s.hits),
                      format_ms(s.saved_ms)});
  t.print(stdout);
  if (!never.empty()) {
    std::printf("\nnever hit\n");
    for (size_t i = 0; i < never.size() && i < 20; ++i)
      std::printf("  %s  %s\n", printable(short_key(never[i]->key)).c_str(), printable(never[i]->site()).c_str());
    if (never.size() > 20) std::printf("  ... and %zu more (--json lists all)\n", never.size() - 20);
  }
  return 0;
}

}  // namespace lazyjit::cache_tool
