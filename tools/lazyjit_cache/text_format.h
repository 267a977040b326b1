// Text helpers shared by the commands: aligned tables, sizes, times, shapes,
// and the parsers for --max-size and --older-than.
#pragma once
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace lazyjit::cache_tool {

// Columns padded to their widest cell; `right[i]` right-aligns column i
// (numbers). Cells longer than `max_width` are cut with "…", but for the last
// column's. Every cell is printed through printable().
struct Table {
  std::vector<std::string> headers;
  std::vector<bool> right;
  std::vector<std::vector<std::string>> rows;
  size_t max_width = 48;
  void print(FILE* out) const;
};

// Strings from disk, a remote or an archive (keys, manifest fields, IR) made
// safe to print on a terminal: control characters (newline, escape, ...), C1
// controls, bidirectional overrides and bytes that are not UTF-8 are written
// as \n, \t, \r, \xNN or \u{NNNN}, and a backslash as \\, so that one
// string is one line and nothing reaches the terminal as a command.
std::string printable(std::string_view s);
// The same for text of several lines (IR, plan, assembly, messages):
// newlines and tabs are kept, and a backslash too.
std::string printable_text(std::string_view s);
// A document for --json: two-space indents; bytes that are not UTF-8 (a file
// name is any bytes) are replaced by U+FFFD rather than failing the dump.
std::string json_text(const nlohmann::json& j);

std::string human_bytes(uint64_t n);           // "5.1 KiB"
std::string format_time(double unix_seconds);  // local "2026-11-30 17:07:22"; "-" for 0; "?" past year 9999
std::string format_ms(double ms);              // "35.9"
// "f32[7,16] f32[64]": each tensor of a manifest's inputs (or outputs) list;
// a negative size (a symbolic dim) prints as s<N>.
std::string shapes_text(const nlohmann::json& tensors);
// "500M", "2G", "1048576", "10KiB" -> bytes. Throws ToolError.
uint64_t parse_size(const std::string& text);
// "30d", "12h", "90m", "45s", "2w" -> seconds. Throws ToolError.
double parse_duration(const std::string& text);
double now_seconds();

}  // namespace lazyjit::cache_tool
