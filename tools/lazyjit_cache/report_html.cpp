// report --html: one self-contained page (no external scripts, styles or
// images, so it opens offline and can be mailed): totals, a sortable entries
// table, bar charts (inline SVG) of compile time and hits by call site, and
// each program's graph drawn by Graphviz (its IR text where dot is missing or
// the graph is too big to draw quickly).
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "tools/lazyjit_cache/cache_index.h"
#include "tools/lazyjit_cache/commands.h"
#include "tools/lazyjit_cache/ir_graph.h"
#include "tools/lazyjit_cache/progress.h"
#include "tools/lazyjit_cache/text_format.h"

namespace lazyjit::cache_tool {

using nlohmann::json;

namespace {

constexpr int kMaxDrawnNodes = 300;     // dot takes seconds beyond this
constexpr size_t kMaxDrawnGraphs = 200;  // and the page megabytes

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v, int digits = 1) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << v;
  return os.str();
}

// A horizontal bar chart: one row per (label, value), largest first.
std::string bar_chart(const std::string& title, std::vector<std::pair<std::string, double>> rows, const std::string& unit) {
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (rows.size() > 15) rows.resize(15);
  double max = 0;
  for (auto& r : rows) max = std::max(max, r.second);
  const int label_w = 260, bar_w = 360, row_h = 22;
  std::ostringstream s;
  s << "<figure><figcaption>" << esc(title) << "</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" width=\""
    << label_w + bar_w + 90 << "\" height=\"" << row_h * std::max<size_t>(rows.size(), 1) + 4 << "\">";
  if (rows.empty()) s << "<text x=\"4\" y=\"16\">no entries</text>";
  for (size_t i = 0; i < rows.size(); ++i) {
    double w = max > 0 ? rows[i].second / max * bar_w : 0;
    int y = static_cast<int>(i) * row_h;
    std::string label = rows[i].first.size() > 40 ? "…" + rows[i].first.substr(rows[i].first.size() - 39) : rows[i].first;
    s << "<text x=\"" << label_w - 6 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\">" << esc(label) << "</text>"
      << "<rect x=\"" << label_w << "\" y=\"" << y + 3 << "\" width=\"" << num(std::max(w, 1.0)) << "\" height=\""
      << row_h - 6 << "\" fill=\"#4a78b5\"><title>" << esc(rows[i].first) << "</title></rect>"
      << "<text x=\"" << label_w + w + 6 << "\" y=\"" << y + 15 << "\">" << num(rows[i].second, unit == "ms" ? 1 : 0) << " " << unit
      << "</text>";
  }
  s << "</svg></figure>\n";
  return s.str();
}

const char* kStyle = R"(
body{font:14px system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;font-size:13px}th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left}
th{cursor:pointer;background:#f3f3f3;user-select:none}th.sorted-asc::after{content:" ▲"}th.sorted-desc::after{content:" ▼"}
td.n{text-align:right;font-variant-numeric:tabular-nums}code{font-size:12px}
figure{display:inline-block;margin:8px 24px 8px 0}figcaption{font-weight:600;margin-bottom:4px}
svg text{font:12px system-ui,sans-serif}details{margin:8px 0;border:1px solid #ddd;padding:6px}
summary{cursor:pointer}pre{font-size:12px;overflow:auto;background:#fafafa;padding:6px}.graph{overflow:auto;max-height:700px}
)";

// Sorts the entries table by the clicked column: numbers by data-v, text by content.
const char* kScript = R"(
document.querySelectorAll('#entries th').forEach(function (th, col) {
  th.addEventListener('click', function () {
    var body = document.querySelector('#entries tbody');
    var rows = Array.prototype.slice.call(body.rows);
    var asc = !th.classList.contains('sorted-asc');
    document.querySelectorAll('#entries th').forEach(function (h) { h.classList.remove('sorted-asc', 'sorted-desc'); });
    th.classList.add(asc ? 'sorted-asc' : 'sorted-desc');
    var numeric = th.dataset.type === 'n';
    rows.sort(function (a, b) {
      var x = a.cells[col], y = b.cells[col];
      var c = numeric ? parseFloat(x.dataset.v) - parseFloat(y.dataset.v) : x.textContent.localeCompare(y.textContent);
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
)";

}  // namespace

int cmd_report(const Common& c, const std::string& html_file) {
  CacheDir cache = open_cache_dir(c.dir);
  std::vector<Entry> all = scan_entries(cache);
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) { return a.compile_ms() > b.compile_ms(); });
  std::map<std::string, std::pair<double, double>> by_site;  // compile ms, hits
  uint64_t bytes = 0;
  int64_t hits = 0;
  double saved = 0;
  for (const Entry& e : all) {
    bytes += e.file_bytes, hits += e.hits, saved += e.hits * e.compile_ms();
    auto& s = by_site[e.site().empty() ? "(unknown)" : e.site()];
    s.first += e.compile_ms(), s.second += e.hits;
  }
  std::vector<std::pair<std::string, double>> compile_rows, hit_rows;
  for (auto& [site, v] : by_site) compile_rows.push_back({site, v.first}), hit_rows.push_back({site, v.second});

  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>lazyjit cache report</title><style>"
    << kStyle << "</style></head><body>\n<h1>lazyjit compile cache</h1>\n<p><code>" << esc(cache.dir) << "</code> — "
    << all.size() << " entries, " << esc(human_bytes(bytes)) << ", " << hits << " hits, "
    << num(hits + (int64_t)all.size() ? 100.0 * hits / (hits + all.size()) : 0) << "% hit ratio, " << num(saved)
    << " ms of compiling saved; generated " << esc(format_time(now_seconds())) << "</p>\n";
  h << bar_chart("Compile time by call site", compile_rows, "ms") << bar_chart("Hits by call site", hit_rows, "hits");

  h << "<h2>Entries</h2>\n<table id=\"entries\"><thead><tr><th>key</th><th>kind</th><th data-type=\"n\">created</th>"
       "<th data-type=\"n\">last used</th><th data-type=\"n\">hits</th><th data-type=\"n\">compile ms</th>"
       "<th data-type=\"n\">size</th><th data-type=\"n\">ops</th><th>site</th><th>inputs</th></tr></thead><tbody>\n";
  for (const Entry& e : all) {
    h << "<tr><td><a href=\"#g-" << esc(e.key) << "\" title=\"" << esc(e.key) << "\"><code>" << esc(short_key(e.key))
      << "</code></a></td><td>" << esc(e.problem.empty() ? e.kind() : "unreadable") << "</td><td class=\"n\" data-v=\""
      << num(e.created(), 3) << "\">" << esc(format_time(e.created())) << "</td><td class=\"n\" data-v=\""
      << num(e.last_used, 3) << "\">" << esc(format_time(e.last_used)) << "</td><td class=\"n\" data-v=\"" << e.hits
      << "\">" << e.hits << "</td><td class=\"n\" data-v=\"" << e.compile_ms() << "\">" << num(e.compile_ms())
      << "</td><td class=\"n\" data-v=\"" << e.file_bytes << "\">" << esc(human_bytes(e.file_bytes))
      << "</td><td class=\"n\" data-v=\"" << e.ops() << "\">" << e.ops() << "</td><td>" << esc(e.site())
      << "</td><td><code>" << esc(e.manifest.is_object() ? shapes_text(e.manifest.value("inputs", json::array())) : e.problem)
      << "</code></td></tr>\n";
  }
  h << "</tbody></table>\n<h2>Programs</h2>\n";

  Progress progress("report", all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const Entry& e = all[i];
    progress.update(i + 1);
    std::string ir = e.manifest.is_object() ? e.manifest.value("ir", std::string()) : "";
    std::string plan = e.manifest.is_object() ? e.manifest.value("plan", std::string()) : "";
    int64_t nodes = std::count(ir.begin(), ir.end(), '\n');
    std::string svg, note;
    if (ir.empty()) note = "no IR in this entry";
    else if (nodes > kMaxDrawnNodes) note = std::to_string(nodes) + " nodes: too many to draw; IR text below";
    else if (i >= kMaxDrawnGraphs) note = "only the " + std::to_string(kMaxDrawnGraphs) + " slowest programs are drawn";
    else svg = dot_to_svg(ir_to_dot(ir), &note);
    h << "<details id=\"g-" << esc(e.key) << "\"" << (i < 3 ? " open" : "") << "><summary><code>" << esc(e.key) << "</code> — " << esc(e.site())
      << ", " << e.ops() << " ops, " << num(e.compile_ms()) << " ms</summary>\n";
    if (!note.empty()) h << "<p><em>" << esc(note) << "</em></p>";
    if (!svg.empty()) h << "<div class=\"graph\">" << svg << "</div>\n";
    h << "<pre>" << esc(ir) << "</pre><pre>" << esc(plan) << "</pre></details>\n";
  }
  progress.done();
  h << "<script>" << kScript << "</script>\n</body></html>\n";

  std::string tmp = html_file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << h.str();
    if (!out.flush()) throw ToolError("lazyjit-cache: cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), html_file.c_str()) != 0) throw ToolError("lazyjit-cache: cannot write " + html_file);
  std::printf("wrote %s (%zu entries, %s)\n", html_file.c_str(), all.size(), human_bytes(h.str().size()).c_str());
  return 0;
}

}  // namespace lazyjit::cache_tool
