// why-miss: a LAZYJIT_LOG=recompiles log (stderr of a run), summarized per sync
// call site: how many compiles, of which kinds, which input dims took which
// sizes, which inputs changed dtype, layout or rank, and which ops changed,
// with what to do about each (the advice follows the change: padding helps a
// varying dim, not a new dtype). Reads only the log.
//
//   lazyjit: compiling at train.py:41: new shapes: x (input 0) dim 0: 7 → 8 (sizes seen: 7, 8)
//   lazyjit: compiling at train.py:41: new shapes: input 0 dim 0: 7 → 8 (sizes seen: 7, 8)
//   lazyjit: compiling at train.py:41: new graph: x (input 2): dtype float32 → float64; ...
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "tools/lazyjit_cache/cache_index.h"
#include "tools/lazyjit_cache/commands.h"
#include "tools/lazyjit_cache/text_format.h"

namespace lazyjit::cache_tool {

using nlohmann::json;

namespace {

struct SiteLog {
  int64_t compiles = 0;
  std::map<std::string, int64_t> kinds;
  std::map<std::string, std::set<int64_t>> dims;  // "input 0 dim 0" -> sizes
  std::vector<std::string> other;                 // op and structure changes, first few
  std::set<std::string> dtypes, layouts, ranks;    // "x (input 0): dtype float32 → float64", ...
};

// The parts of a detail ("a; b; c") that say `what` (": dtype ", ": layout ", ": rank ").
void collect(const std::string& detail, const char* what, std::set<std::string>* into) {
  size_t start = 0;
  while (start < detail.size() && into->size() < 8) {
    size_t end = std::min(detail.find("; ", start), detail.size());
    std::string part = detail.substr(start, end - start);
    if (part.find(what) != std::string::npos && part.rfind("op #", 0) != 0) into->insert(part);
    start = end + 2;
  }
}

}  // namespace

int cmd_why_miss(const Common& c, const std::string& log_file) {
  std::ifstream in(log_file);
  if (!in) throw ToolError("lazyjit-cache: cannot read the log " + log_file, 2);
  static const std::string kPrefix = "lazyjit: compiling at ";
  // "input 0 dim 1: 7 → 8", or with the input's name: "x (input 0) dim 1: 7 → 8".
  static const std::regex kDim(R"(((?:[^\s;:]+ \(input \d+\)|input \d+) dim \d+): (\d+) → (\d+))");
  std::map<std::string, SiteLog> sites;
  std::string line;
  int64_t total = 0;
  while (std::getline(in, line)) {
    size_t at = line.find(kPrefix);
    if (at == std::string::npos) continue;
    std::string rest = line.substr(at + kPrefix.size());
    // A compile started in the background says so at the end of its line.
    static const std::string kBackground = " (in the background: runs op by op until ready)";
    if (rest.size() >= kBackground.size() && rest.compare(rest.size() - kBackground.size(), kBackground.size(), kBackground) == 0)
      rest.resize(rest.size() - kBackground.size());
    size_t sep = rest.find(": ");
    if (sep == std::string::npos) continue;
    SiteLog& s = sites[rest.substr(0, sep)];
    rest = rest.substr(sep + 2);
    size_t kind_end = rest.find(": ");
    std::string kind = rest.substr(0, kind_end), detail = kind_end == std::string::npos ? "" : rest.substr(kind_end + 2);
    ++s.compiles, ++s.kinds[kind], ++total;
    // std::regex recurses per character it matches: a line of a million
    // digits would overflow the stack. The runtime's lines are short.
    if (detail.size() <= 4096)
      for (std::sregex_iterator it(detail.begin(), detail.end(), kDim), end; it != end; ++it) {
        try {
          int64_t from = std::stoll((*it)[2]), to = std::stoll((*it)[3]);
          s.dims[(*it)[1]].insert(from);
          s.dims[(*it)[1]].insert(to);
        } catch (const std::out_of_range&) {  // not a size lazyjit printed
        }
      }
    collect(detail, ": dtype ", &s.dtypes);
    collect(detail, ": layout ", &s.layouts);
    collect(detail, ": rank ", &s.ranks);
    size_t op = detail.find("op #");
    if (op != std::string::npos && s.other.size() < 3) s.other.push_back(detail.substr(op));
  }
  if (c.json) {
    json rows = json::array();
    for (const auto& [site, s] : sites) {
      json dims = json::object();
      for (const auto& [d, sizes] : s.dims) dims[d] = std::vector<int64_t>(sizes.begin(), sizes.end());
      rows.push_back({{"site", site}, {"compiles", s.compiles}, {"kinds", s.kinds}, {"varying_dims", dims},
                      {"dtype_changes", s.dtypes}, {"layout_changes", s.layouts}, {"rank_changes", s.ranks},
                      {"op_changes", s.other}});
    }
    std::printf("%s\n", json({{"schema", "lazyjit-cache/why-miss/1"}, {"log", log_file}, {"compiles", total},
                              {"sites", rows}}).dump(1, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
  }
  if (sites.empty()) {
    std::printf("no compiles in %s (was it written with LAZYJIT_LOG=recompiles?)\n", printable(log_file).c_str());
    return 0;
  }
  std::printf("%lld compiles at %zu call sites\n", (long long)total, sites.size());
  for (const auto& [site, s] : sites) {
    std::printf("\n%s: %lld compiles (", printable(site).c_str(), (long long)s.compiles);
    bool first = true;
    for (const auto& [k, n] : s.kinds)
      std::printf("%s%lld %s", first ? "" : ", ", (long long)n, printable(k).c_str()), first = false;
    std::printf(")\n");
    for (const auto& [d, sizes] : s.dims) {
      std::string list;
      for (int64_t x : sizes) list += (list.empty() ? "" : ", ") + std::to_string(x);
      std::printf("  %s took %zu sizes: %s\n", printable(d).c_str(), sizes.size(), list.c_str());
    }
    for (const auto* set : {&s.dtypes, &s.layouts, &s.ranks})
      for (const std::string& d : *set) std::printf("  %s\n", printable(d).c_str());
    for (const std::string& o : s.other) std::printf("  %s\n", printable(o).c_str());
    // Advice for what changed, each kind its own.
    if (!s.dims.empty() && s.compiles > 2)
      std::printf("  → a varying dim: pad or bucket it to a few sizes (each size is a program)\n");
    if (!s.dtypes.empty())
      std::printf("  → a dtype changed: each dtype is a program; cast once, before the loop (model.to(dtype), "
                  "x.to(dtype)), so that every step sees the same dtype\n");
    if (!s.layouts.empty())
      std::printf("  → a layout changed (a transposed or strided view): call .contiguous() on it before the step, "
                  "or pass it in the same layout every time\n");
    if (!s.ranks.empty()) std::printf("  → a rank changed: each rank is a program; keep the number of dims fixed\n");
  }
  return 0;
}

}  // namespace lazyjit::cache_tool
