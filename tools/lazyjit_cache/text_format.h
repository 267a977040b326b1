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
//
// With `width` set (terminal_width()), every line fits in it: the columns with
// a `min_width` give up what is needed down to it, cut on the right, or on the
// left where `cut_left` (paths: the file and line are what tell entries
// apart), and if that is not enough the columns with a `drop` rank are left
// out, rank 1 first. A column marked `list` holds space-separated items
// (shapes): it is at most `max_width` wide, and cut between items, ending in
// "+N more". A row listed in `whole_last` keeps its last cell whole (a
// damaged entry's reason).
struct Table {
  std::vector<std::string> headers;
  std::vector<bool> right;
  std::vector<std::vector<std::string>> rows;
  size_t max_width = 48;
  size_t width = 0;  // 0: no limit
  std::vector<size_t> min_width;
  std::vector<bool> cut_left;
  std::vector<bool> list;
  std::vector<int> drop;
  std::vector<size_t> whole_last;
  void print(FILE* out) const;
};

// The terminal's width in columns: $COLUMNS, else the width of the terminal on
// stdout, else (output to a file or a pipe) 160: every column of ls fits.
size_t terminal_width();
// `s` in at most `max` columns: cut on the right ("abc…"), or on the left
// ("…/models/llama/modeling_llama.py:123", from a path separator when one is
// near), counting a UTF-8 sequence as one column.
std::string cut_right(const std::string& s, size_t max);
std::string cut_left(const std::string& s, size_t max);
// Space-separated items in at most `max` columns: "f32[1,3] f32[2,3] +38 more".
std::string cut_list(const std::string& s, size_t max);

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
