// Text helpers shared by the commands: aligned tables, sizes, times, shapes,
// and the parsers for --max-size and --older-than.
#pragma once
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lazyjit::cache_tool {

// Columns padded to their widest cell; `right[i]` right-aligns column i
// (numbers). Cells longer than `max_width` are cut with "…".
struct Table {
  std::vector<std::string> headers;
  std::vector<bool> right;
  std::vector<std::vector<std::string>> rows;
  size_t max_width = 48;
  void print(FILE* out) const;
};

std::string human_bytes(uint64_t n);           // "5.1 KiB"
std::string format_time(double unix_seconds);  // local "2026-11-30 17:07:22"; "-" for 0
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
