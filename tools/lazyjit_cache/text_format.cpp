#include "tools/lazyjit_cache/text_format.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <ctime>
#include <optional>

#include "env/env.h"
#include "tools/lazyjit_cache/cache_index.h"

namespace lazyjit::cache_tool {

namespace {

// Display width, counting a UTF-8 sequence as one column.
size_t width_of(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
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

std::string cut_right(const std::string& s, size_t max) {
  if (width_of(s) <= max) return s;
  if (max == 0) return "";
  std::string out;
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = s[i];
    if ((c & 0xC0) != 0x80 && ++n > max - 1) break;
    out += s[i];
  }
  return out + "…";
}

std::string cut_left(const std::string& s, size_t max) {
  size_t w = width_of(s);
  if (w <= max) return s;
  if (max == 0) return "";
  // The byte where the last max - 1 columns begin.
  size_t skip = w - (max - 1), n = 0, at = 0;
  for (; at < s.size(); ++at) {
    unsigned char c = s[at];
    if ((c & 0xC0) != 0x80 && n++ == skip) break;
  }
  std::string tail = s.substr(at);
  // From a separator when one is near: "…/models/llama/x.py:12", not "…dels/llama/x.py:12".
  size_t slash = tail.find('/');
  if (slash != std::string::npos && slash > 0 && slash <= tail.size() / 3) tail = tail.substr(slash);
  return "…" + tail;
}

std::string cut_list(const std::string& s, size_t max) {
  if (width_of(s) <= max) return s;
  std::vector<std::string> items;
  for (size_t at = 0; at <= s.size();) {
    size_t end = std::min(s.find(' ', at), s.size());
    if (end > at) items.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  std::string out;
  for (size_t n = 1; n < items.size(); ++n) {
    std::string head;
    for (size_t i = 0; i < n; ++i) head += (i ? " " : "") + items[i];
    std::string text = head + " +" + std::to_string(items.size() - n) + " more";
    if (width_of(text) > max) break;
    out = text;
  }
  return out.empty() ? cut_right(s, max) : out;
}

size_t terminal_width() {
  if (std::optional<std::string> columns = env::find("COLUMNS")) {
    const char* c = columns->c_str();
    char* end = nullptr;
    long v = std::strtol(c, &end, 10);
    if (end != c && *end == '\0' && v > 0) return static_cast<size_t>(std::max(v, 40L));
  }
  struct winsize ws{};
  if (::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return std::max<size_t>(ws.ws_col, 40);
  return 160;
}

void Table::print(FILE* out) const {
  const size_t ncol = headers.size();
  auto is_whole = [&](size_t row) { return std::find(whole_last.begin(), whole_last.end(), row) != whole_last.end(); };
  auto shrinkable = [&](size_t i) { return i < min_width.size() && min_width[i] > 0; };
  std::vector<std::vector<std::string>> cells;
  cells.push_back(headers);
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    const auto& r = rows[ri];
    std::vector<std::string> c;
    // Without a width, the last column is not cut: nothing is aligned after
    // it, and it holds what must be read whole (a damaged entry's reason).
    for (size_t i = 0; i < r.size(); ++i)
      c.push_back(i + 1 == r.size() || width > 0 ? printable(r[i]) : cut_right(printable(r[i]), max_width));
    cells.push_back(std::move(c));
  }
  // Natural widths (a whole last cell is not aligned: it does not widen its column).
  std::vector<size_t> w(ncol);
  for (size_t ri = 0; ri < cells.size(); ++ri)
    for (size_t i = 0; i < cells[ri].size() && i < ncol; ++i)
      if (!(ri > 0 && i + 1 == cells[ri].size() && is_whole(ri - 1))) w[i] = std::max(w[i], width_of(cells[ri][i]));
  for (size_t i = 0; i < ncol && i < list.size(); ++i)
    if (list[i]) w[i] = std::min(w[i], std::max(max_width, width_of(headers[i])));
  std::vector<bool> shown(ncol, true);
  if (width > 0) {
    auto need = [&] {
      size_t n = 0, cols = 0;
      for (size_t i = 0; i < ncol; ++i)
        if (shown[i]) n += shrinkable(i) ? std::min(w[i], min_width[i]) : w[i], ++cols;
      return n + (cols ? 2 * (cols - 1) : 0);
    };
    while (need() > width) {
      size_t victim = ncol;
      for (size_t i = 0; i < ncol && i < drop.size(); ++i)
        if (shown[i] && drop[i] > 0 && (victim == ncol || drop[i] < drop[victim])) victim = i;
      if (victim == ncol) break;  // nothing left to leave out: the lines are as short as they get
      shown[victim] = false;
    }
    // What is left over goes to the shrinkable columns, left to right, those
    // cut on the left last (a path keeps its tail in any width).
    size_t spare = width > need() ? width - need() : 0;
    for (bool left_cut : {false, true})
      for (size_t i = 0; i < ncol; ++i) {
        if (!shown[i] || !shrinkable(i) || (i < cut_left.size() && cut_left[i]) != left_cut) continue;
        if (w[i] <= min_width[i]) continue;
        size_t give = std::min(w[i] - min_width[i], spare);
        spare -= give;
        w[i] = min_width[i] + give;
      }
  }
  size_t last = ncol;
  for (size_t i = 0; i < ncol; ++i)
    if (shown[i]) last = i;
  std::string line;
  for (size_t ri = 0; ri < cells.size(); ++ri) {
    const auto& r = cells[ri];
    line.clear();
    bool first = true;
    for (size_t i = 0; i < r.size() && i < ncol; ++i) {
      if (!shown[i]) continue;
      const bool is_last = i == last || i + 1 == r.size();
      std::string cell = r[i];
      if (width > 0 && !(is_last && ri > 0 && is_whole(ri - 1)))
        cell = i < cut_left.size() && cut_left[i] ? lazyjit::cache_tool::cut_left(cell, w[i])
               : i < list.size() && list[i]       ? cut_list(cell, w[i])
                                                  : cut_right(cell, w[i]);
      std::string pad(w[i] > width_of(cell) ? w[i] - width_of(cell) : 0, ' ');
      if (!first) line += "  ";
      first = false;
      if (i < right.size() && right[i]) line += pad + cell;
      else line += is_last ? cell : cell + pad;
      if (is_last) break;
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
