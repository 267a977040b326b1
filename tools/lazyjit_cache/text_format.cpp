#include "tools/lazyjit_cache/text_format.h"

#include <chrono>
#include <cmath>
#include <ctime>

#include "tools/lazyjit_cache/cache_index.h"

namespace lazyjit::cache_tool {

namespace {

// Display width, counting a UTF-8 sequence as one column.
size_t width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string cut(const std::string& s, size_t max) {
  if (width(s) <= max) return s;
  std::string out;
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = s[i];
    if ((c & 0xC0) != 0x80 && ++n > max - 1) break;
    out += s[i];
  }
  return out + "…";
}

}  // namespace

void Table::print(FILE* out) const {
  std::vector<size_t> w(headers.size());
  std::vector<std::vector<std::string>> cells;
  cells.push_back(headers);
  for (const auto& r : rows) {
    std::vector<std::string> c;
    for (const auto& s : r) c.push_back(cut(s, max_width));
    cells.push_back(std::move(c));
  }
  for (const auto& r : cells)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], width(r[i]));
  std::string line;
  for (const auto& r : cells) {
    line.clear();
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) {
      std::string pad(w[i] - width(r[i]), ' ');
      bool last = i + 1 == r.size();
      if (i) line += "  ";
      if (i < right.size() && right[i]) line += pad + r[i];
      else line += last ? r[i] : r[i] + pad;
    }
    line += '\n';
    std::fputs(line.c_str(), out);
  }
}

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = n;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)n);
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string format_time(double t) {
  if (t <= 0) return "-";
  std::time_t s = static_cast<std::time_t>(t);
  std::tm tm;
  localtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string format_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", ms);
  return buf;
}

std::string shapes_text(const nlohmann::json& tensors) {
  if (!tensors.is_array()) return "";
  std::string out;
  for (const auto& t : tensors) {
    if (!out.empty()) out += ' ';
    out += t.value("dtype", std::string("?")) + "[";
    const auto& sizes = t.contains("sizes") ? t["sizes"] : nlohmann::json::array();
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (i) out += ',';
      int64_t d = sizes[i].is_number() ? sizes[i].get<int64_t>() : 0;
      out += d < 0 ? "s" + std::to_string(-d - 1) : std::to_string(d);
    }
    out += "]";
  }
  return out;
}

static double parse_number(const std::string& text, size_t* used, const char* what) {
  try {
    double v = std::stod(text, used);
    if (v < 0 || !std::isfinite(v)) throw std::invalid_argument("negative");
    return v;
  } catch (const std::exception&) {
    throw ToolError(std::string("lazyjit-cache: bad ") + what + " '" + text + "'");
  }
}

uint64_t parse_size(const std::string& text) {
  size_t used = 0;
  double v = parse_number(text, &used, "size (want e.g. 500M, 2G, 1048576)");
  std::string unit = text.substr(used);
  for (auto& c : unit) c = std::toupper(static_cast<unsigned char>(c));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  double mult = unit.empty() ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : -1;
  if (mult < 0) throw ToolError("lazyjit-cache: bad size '" + text + "' (units: K, M, G)");
  return static_cast<uint64_t>(v * mult);
}

double parse_duration(const std::string& text) {
  size_t used = 0;
  double v = parse_number(text, &used, "duration (want e.g. 30d, 12h, 90m, 45s)");
  std::string unit = text.substr(used);
  double mult = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400
              : unit == "w" ? 604800 : -1;
  if (mult < 0) throw ToolError("lazyjit-cache: bad duration '" + text + "' (units: s, m, h, d, w)");
  return v * mult;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace lazyjit::cache_tool
