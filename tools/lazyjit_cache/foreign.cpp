// Which entries were built for a CPU this machine is not (see foreign.h).
#include "tools/lazyjit_cache/foreign.h"

#include <fstream>
#include <sstream>
#include <variant>

#include "cache/disk_error.h"
#include "formats/manifest.h"

namespace lazyjit::cache_tool {

using nlohmann::json;

namespace {

// LLVM's x86 feature names where /proc/cpuinfo spells them differently;
// features in neither list (LLVM-internal ones like "evex512") are not checked.
const std::pair<const char*, const char*> kRenamed[] = {
    {"sse3", "pni"}, {"sse4.1", "sse4_1"}, {"sse4.2", "sse4_2"}, {"pclmul", "pclmulqdq"}, {"lzcnt", "abm"},
    {"rdrnd", "rdrand"}, {"64bit", "lm"}, {"sahf", "lahf_lm"}, {"crc32", "sse4_2"}, {"bmi", "bmi1"}, {"sha", "sha_ni"},
    {"avx512bf16", "avx512_bf16"}, {"avx512vbmi2", "avx512_vbmi2"}, {"avx512vnni", "avx512_vnni"},
    {"avx512bitalg", "avx512_bitalg"}, {"avx512vpopcntdq", "avx512_vpopcntdq"}, {"avx512fp16", "avx512_fp16"},
    {"avxvnni", "avx_vnni"}};
const char* const kSameName[] = {"sse", "sse2", "ssse3", "avx", "avx2", "fma", "f16c", "bmi2", "popcnt", "movbe",
                                 "aes", "adx", "gfni", "vaes", "vpclmulqdq", "avx512f", "avx512bw", "avx512cd",
                                 "avx512dq", "avx512vl", "avx512ifma", "avx512vbmi", "xsave", "cx16", "cx8", "mmx",
                                 "fxsr", "cmov"};

}  // namespace

std::set<std::string> host_cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::stringstream ss(line.substr(line.find(':') + 1));
    for (std::string f; ss >> f;) flags.insert(f);
    break;
  }
  return flags;
}

std::string foreign_reason(const json& m, const std::string& expect_fingerprint, const std::set<std::string>& host) {
  std::string fp = m.value("code_fingerprint", std::string());
  if (!expect_fingerprint.empty())
    return fp == expect_fingerprint ? "" : "code_fingerprint differs from --expect-fingerprint";
  std::string features;
  if (m.contains("target") && m["target"].is_object()) features = m["target"].value("features", "");
  else if (size_t at = fp.find(";features "); at != std::string::npos)
    features = fp.substr(at + 10, fp.find(';', at + 1) - at - 10);
  if (host.empty()) return "";  // not Linux/x86: nothing to compare against
  std::stringstream ss(features);
  std::string missing;
  for (std::string f; std::getline(ss, f, ',');) {
    if (f.size() < 2 || f[0] != '+') continue;
    f = f.substr(1);
    std::string flag;
    for (auto& [llvm, cpuinfo] : kRenamed)
      if (f == llvm) flag = cpuinfo;
    for (const char* same : kSameName)
      if (f == same) flag = same;
    if (!flag.empty() && !host.count(flag)) missing += (missing.empty() ? "" : ",") + f;
  }
  return missing.empty() ? "" : "needs CPU features this machine lacks: " + missing;
}

std::string admission_refusal(std::string_view file, const std::string& key, const std::string& secret,
                              bool allow_foreign,
                              const std::string& expect_fingerprint, const std::set<std::string>& host,
                              cache::entry_file::Decoded* out) {
  auto decoded = cache::entry_file::decode(file, secret, key);
  if (auto* err = std::get_if<cache::entry_file::DecodeError>(&decoded))
    return std::string(cache::disk_error_name(err->kind)) + ": " + err->message;
  *out = std::get<cache::entry_file::Decoded>(decoded);
  if (allow_foreign) return "";
  std::string problem;
  json m = formats::parse_manifest(out->manifest, &problem);
  if (!m.is_object()) return std::string(cache::disk_error_name(cache::DiskError::Corrupt)) + ": " + problem;
  std::string why = foreign_reason(m, expect_fingerprint, host);
  return why.empty() ? "" : "foreign: " + why;
}

}  // namespace lazyjit::cache_tool
