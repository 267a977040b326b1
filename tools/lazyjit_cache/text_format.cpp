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

// The length of the UTF-8 sequence at s[i], with its code point in *cp; 0
// when the bytes there are not UTF-8 (overlong, surrogate, cut short, ...).
size_t utf8_at(std::string_view s, size_t i, uint32_t* cp) {
  static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  unsigned char c = s[i];
  size_t n = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t v = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    unsigned char d = s[i + k];
    if ((d & 0xC0) != 0x80) return 0;
    v = (v << 6) | (d & 0x3F);
  }
  if (v < kMin[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

// C1 controls (a terminal may take U+009B as CSI) and the marks that reorder
// what is shown (U+202E shows the text after it backwards).
bool hidden_control(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x200E || cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

std::string escaped(std::string_view s, bool lines) {
  std::string out;
  out.reserve(s.size());
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      if (lines && (c == '\n' || c == '\t')) out += static_cast<char>(c);
      else if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else if (c == '\r') out += "\\r";
      else if (c == '\\' && !lines) out += "\\\\";
      else if (c < 0x20 || c == 0x7f) std::snprintf(buf, sizeof buf, "\\x%02x", c), out += buf;
      else out += static_cast<char>(c);
      continue;
    }
    uint32_t cp = 0;
    size_t n = utf8_at(s, i, &cp);
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", c), out += buf;
      ++i;
      continue;
    }
    if (hidden_control(cp)) std::snprintf(buf, sizeof buf, "\\u{%04x}", cp), out += buf;
    else out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

std::string printable(std::string_view s) { return escaped(s, /*lines=*/false); }
std::string printable_text(std::string_view s) { return escaped(s, /*lines=*/true); }

std::string json_text(const nlohmann::json& j) { return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace); }

void Table::print(FILE* out) const {
  std::vector<size_t> w(headers.size());
  std::vector<std::vector<std::string>> cells;
  cells.push_back(headers);
  for (const auto& r : rows) {
    std::vector<std::string> c;
    // The last column is not cut: nothing is aligned after it, and it holds
    // what must be read whole (a damaged entry's reason).
    for (size_t i = 0; i < r.size(); ++i) c.push_back(i + 1 == r.size() ? printable(r[i]) : cut(printable(r[i]), max_width));
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
  if (!(t > 0)) return "-";
  if (t >= 253402300800.0) return "?";  // past 9999-12-31: time_t would overflow or strftime print garbage
  std::time_t s = static_cast<std::time_t>(t);
  std::tm tm;
  if (!localtime_r(&s, &tm)) return "?";
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
      out += d < 0 ? "s" + std::to_string(-(d + 1)) : std::to_string(d);  // -(d + 1): no overflow at INT64_MIN
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
