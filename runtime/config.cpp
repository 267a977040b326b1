#include "runtime/config.h"

#include "cache/cache_dir.h"
#include "cache/redis_store.h"
#include "debug/metrics.h"
#include "debug/notice.h"
#include "env/env.h"
#include "graph_ir/op_kind.h"
#include "runtime/backend.h"

#include <algorithm>
#include <cstdint>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace lazyjit::runtime {

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// A whole decimal integer in [lo, hi]; false for anything else ("abc", "4x", "").
bool parse_int(const std::string& s, long long lo, long long hi, long long* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

enum class Bytes { Ok, Malformed, TooBig };

// Bytes with an optional K/M/G suffix (powers of 1024), from 1 to 2^63 - 1 (a
// count that fits an int64: the caches and Redis's GETRANGE take it as one).
// A count past that is TooBig, never a wrapped number.
Bytes parse_bytes(const std::string& s, uint64_t* out) {
  std::string digits = s;
  uint64_t unit = 1;
  char last = s.empty() ? '\0' : s.back();
  if (last == 'K' || last == 'k') unit = 1ull << 10;
  if (last == 'M' || last == 'm') unit = 1ull << 20;
  if (last == 'G' || last == 'g') unit = 1ull << 30;
  if (unit != 1) digits.pop_back();
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return Bytes::Malformed;
  errno = 0;
  unsigned long long v = std::strtoull(digits.c_str(), nullptr, 10);
  if (errno == ERANGE) return Bytes::TooBig;
  if (v == 0) return Bytes::Malformed;
  constexpr uint64_t kMax = static_cast<uint64_t>(INT64_MAX);
  if (v > kMax / unit) return Bytes::TooBig;
  *out = v * unit;
  return Bytes::Ok;
}

const char* const kKnown[] = {"LAZYJIT_MODE", "LAZYJIT_DUMP", "LAZYJIT_DISABLE_PASSES", "LAZYJIT_VECTOR_BITS",
                              "LAZYJIT_NUM_THREADS", "LAZYJIT_LOG", "LAZYJIT_RECOMPILE_LIMIT",
                              "LAZYJIT_ON_RECOMPILE_LIMIT", "LAZYJIT_DYNAMIC", "LAZYJIT_OPT_LEVEL", "LAZYJIT_DEBUG_NANS", "LAZYJIT_CHECK", "LAZYJIT_FAULT", "LAZYJIT_TRACE", "LAZYJIT_DEBUG", "LAZYJIT_MAX_GRAPH_OPS", "LAZYJIT_MAX_PROGRAMS", "LAZYJIT_CACHE", "LAZYJIT_CACHE_DIR",
                              "LAZYJIT_CACHE_MAX_BYTES", "LAZYJIT_CACHE_SECRET", "LAZYJIT_REMOTE_CACHE",
                              "LAZYJIT_REMOTE_TIMEOUT_MS", "LAZYJIT_REMOTE_MAX_ENTRY_BYTES", "LAZYJIT_BACKGROUND_COMPILE", "LAZYJIT_SMALL_GEMM", "LAZYJIT_TARGET", "LAZYJIT_CUDA_GRAPHS"};
// Read by others: the test hooks (cache/disk_store.h), the bench, the build
// scripts, the CUDA target's toolkit paths (targets/cuda/toolkit.h).
const char* const kOtherPrefixes[] = {"LAZYJIT_TEST_", "LAZYJIT_BENCH_", "LAZYJIT_JOBS", "LAZYJIT_LIBDEVICE",
                                      "LAZYJIT_PTXAS"};
bool is_op_name(const std::string& s) {
  for (int k = 0; k <= static_cast<int>(ir::kLastOpKind); ++k)
    if (ir::op_name(static_cast<ir::OpKind>(k)) == s) return true;
  return false;
}

// A URL as a warning may print it: a password in it is not shown.
std::string redact_password(const std::string& url) {
  size_t start = url.find("//"), at = url.rfind('@');
  if (start == std::string::npos || at == std::string::npos || at < start) return url;
  return url.substr(0, start + 2) + "***" + url.substr(at);
}

const char* const kPasses[] = {"dce", "fold", "cse", "gemm_epilogue", "fuse", "buffers"};

}  // namespace

Config Config::from(const std::function<std::string(const char*)>& env) {
  Config c;
  auto bad = [&](const char* name, const std::string& value, const std::string& want, const std::string& dflt) {
    c.warnings.push_back(std::string(name) + "=" + value + " is not " + want + "; using " + dflt);
  };
  auto bytes = [&](const char* name, uint64_t* field, const char* example, const char* dflt) {
    std::string s = env(name);
    if (s.empty()) return;
    switch (parse_bytes(s, field)) {
      case Bytes::Ok: break;
      case Bytes::Malformed: bad(name, s, std::string("a byte count (e.g. ") + example + ")", dflt); break;
      case Bytes::TooBig: bad(name, s, "a byte count below 2^63 (at most 8589934591G)", dflt); break;
    }
  };
  if (std::string m = env("LAZYJIT_MODE"); m == "step") c.step_mode = true;
  else if (!m.empty() && m != "lazy") bad("LAZYJIT_MODE", m, "lazy or step", "lazy");
  // The targets' names are the backend's (runtime/backend.h); the default first.
  if (std::string t = env("LAZYJIT_TARGET"); !t.empty()) {
    const std::vector<std::string>& names = target_names();
    if (std::find(names.begin(), names.end(), t) != names.end()) {
      c.target = t;
    } else {
      std::string want;
      for (size_t i = 0; i < names.size(); ++i) want += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
      bad("LAZYJIT_TARGET", t, want, names.front());
    }
  }
  c.dump_dir = env("LAZYJIT_DUMP");
  for (const std::string& what : split_commas(env("LAZYJIT_LOG"))) {
    if (what == "recompiles") c.log_recompiles = true;
    else if (what == "syncs") c.log_syncs = true;
    else if (what == "fallbacks") c.notices = std::max(c.notices, 2);
    else if (what == "none" || what == "off") c.notices = 0;
    else bad("LAZYJIT_LOG", what, "a log name (recompiles, syncs, fallbacks, none)", "no such log");
  }
  for (const std::string& p : split_commas(env("LAZYJIT_DISABLE_PASSES"))) {
    bool known = false;
    for (const char* k : kPasses) known |= p == k;
    if (known) c.disabled_passes.push_back(p);
    else bad("LAZYJIT_DISABLE_PASSES", p, "a pass name (dce, fold, cse, gemm_epilogue, fuse, buffers)", "no such pass off");
  }
  long long v;
  if (std::string s = env("LAZYJIT_VECTOR_BITS"); !s.empty()) {
    if (parse_int(s, 128, 512, &v) && (v == 128 || v == 256 || v == 512)) c.vector_bits = static_cast<int>(v);
    else bad("LAZYJIT_VECTOR_BITS", s, "128, 256 or 512", "512");
  }
  if (std::string s = env("LAZYJIT_DEBUG_NANS"); s == "1") c.debug_nans = true;
  else if (!s.empty() && s != "0") bad("LAZYJIT_DEBUG_NANS", s, "0 or 1", "0");
  if (std::string s = env("LAZYJIT_CHECK"); s == "1") c.check_graphs = true;
  else if (!s.empty() && s != "0") bad("LAZYJIT_CHECK", s, "0 or 1", "0");
  if (std::string s = env("LAZYJIT_FAULT"); !s.empty()) {
    if (is_op_name(s)) c.fault = s;
    else bad("LAZYJIT_FAULT", s, "the name of an IR op (mul, exp, reduce_sum, ...)", "no fault");
  }
  c.trace_file = env("LAZYJIT_TRACE");
  if (std::string s = env("LAZYJIT_DEBUG"); !s.empty()) {
    if (parse_int(s, 0, 4, &v)) c.debug_level = static_cast<int>(v);
    else bad("LAZYJIT_DEBUG", s, "0, 1, 2, 3 or 4", "0");
  }
  if (c.debug_level >= 1) c.log_recompiles = c.log_syncs = true;
  if (c.debug_level >= 2 && c.dump_dir.empty()) c.dump_dir = "lazyjit_debug";
  if (c.debug_level == 2) c.dump_llvm = false;
  if (c.debug_level >= 4) c.debug_nans = c.op_timing = true;
  if (std::string s = env("LAZYJIT_OPT_LEVEL"); !s.empty()) {
    if (parse_int(s, 0, 3, &v)) c.opt_level = static_cast<int>(v);
    else bad("LAZYJIT_OPT_LEVEL", s, "0, 1, 2 or 3", std::to_string(c.opt_level));
  }
  if (std::string s = env("LAZYJIT_NUM_THREADS"); !s.empty()) {
    // More workers than a few per core only oversubscribe it (and a oneTBB arena
    // of 100,000 threads crashes at exit).
    long long cap = 4ll * std::max(1u, std::thread::hardware_concurrency());
    if (parse_int(s, 1, cap, &v)) c.num_threads = static_cast<int>(v);
    else bad("LAZYJIT_NUM_THREADS", s, "an integer from 1 to " + std::to_string(cap), "torch.get_num_threads()");
  }
  if (std::string s = env("LAZYJIT_RECOMPILE_LIMIT"); !s.empty()) {
    if (parse_int(s, 1, 1ll << 30, &v)) c.recompile_limit = static_cast<int>(v);
    else bad("LAZYJIT_RECOMPILE_LIMIT", s, "a positive integer", "8");
  }
  if (std::string s = env("LAZYJIT_ON_RECOMPILE_LIMIT"); s == "error") c.on_recompile_limit = RecompileStance::Error;
  // "eager" is op_by_op's older name, still accepted.
  else if (s == "op_by_op" || s == "eager") c.on_recompile_limit = RecompileStance::OpByOp;
  else if (!s.empty() && s != "warn") bad("LAZYJIT_ON_RECOMPILE_LIMIT", s, "warn, error or op_by_op", "warn");
  if (std::string s = env("LAZYJIT_DYNAMIC"); s == "off") c.dynamic = lowering::Shapes::Off;
  else if (s == "all") c.dynamic = lowering::Shapes::All;
  else if (!s.empty() && s != "auto") bad("LAZYJIT_DYNAMIC", s, "auto, off or all", "auto");
  if (std::string s = env("LAZYJIT_MAX_GRAPH_OPS"); !s.empty()) {
    if (parse_int(s, 1, 1ll << 40, &v)) c.max_graph_ops = v;
    else bad("LAZYJIT_MAX_GRAPH_OPS", s, "a positive integer", "10000");
  }
  if (std::string s = env("LAZYJIT_MAX_PROGRAMS"); !s.empty()) {
    if (parse_int(s, 1, 1ll << 30, &v)) c.max_programs = v;
    else bad("LAZYJIT_MAX_PROGRAMS", s, "a positive integer", "256");
  }
  // Switches that are on unless set to off (or 0, false).
  auto on_unless_off = [&](const char* name, bool* field) {
    std::string s = env(name);
    if (s == "off" || s == "0" || s == "false") *field = false;
    else if (!s.empty() && s != "on" && s != "1" && s != "true") bad(name, s, "on or off", "on");
  };
  on_unless_off("LAZYJIT_BACKGROUND_COMPILE", &c.background_compile);
  on_unless_off("LAZYJIT_CACHE", &c.disk_cache);
  on_unless_off("LAZYJIT_SMALL_GEMM", &c.small_gemm);
  on_unless_off("LAZYJIT_CUDA_GRAPHS", &c.cuda_graphs);
  c.cache_dir = cache::default_cache_dir(env).dir;
  bytes("LAZYJIT_CACHE_MAX_BYTES", &c.cache_max_bytes, "500M, 2G", "2G");
  c.cache_secret = env("LAZYJIT_CACHE_SECRET");
  if (std::string s = env("LAZYJIT_REMOTE_CACHE"); !s.empty()) {
    cache::RedisUrl url;
    std::string why;
    if (cache::RedisUrl::parse(s, &url, &why)) c.remote_cache = s;
    else bad("LAZYJIT_REMOTE_CACHE", redact_password(s), "a redis://host:port/db URL (" + why + ")", "no remote cache");
  }
  if (std::string s = env("LAZYJIT_REMOTE_TIMEOUT_MS"); !s.empty()) {
    if (parse_int(s, 1, 60000, &v)) c.remote_timeout_ms = static_cast<int>(v);
    else bad("LAZYJIT_REMOTE_TIMEOUT_MS", s, "milliseconds from 1 to 60000", "100");
  }
  bytes("LAZYJIT_REMOTE_MAX_ENTRY_BYTES", &c.remote_max_entry_bytes, "16M, 1G", "64M");
  return c;
}

bool Config::is_switch(const std::string& name) {
  for (const char* k : kKnown)
    if (name == k) return true;
  return false;
}

std::string Config::check_switch(const std::string& name, const std::string& value) {
  if (!is_switch(name)) return name + " is not a lazyjit switch";
  Config c = from([&](const char* n) { return name == n ? value : std::string(); });
  if (c.warnings.empty()) return "";
  // The warning says what from_env would fall back to; here nothing falls back.
  std::string w = c.warnings.front();
  return w.substr(0, w.rfind("; using "));
}

Config Config::from_env() {
  Config c = from([](const char* name) { return env::get(name); });
  // A misspelt switch would otherwise be silently ignored.
  for (const auto& [name, value] : env::with_prefix("LAZYJIT_")) {
    bool known = is_switch(name);
    for (const char* p : kOtherPrefixes) known |= name.rfind(p, 0) == 0;
    if (!known) c.warnings.push_back("unknown setting " + name + " (ignored; the switches are listed in docs/switches.md)");
  }
  return c;
}

std::string Config::codegen_text() const {
  // Vector width and the target's CPU features or GPU architecture reach the
  // code through the target's own fingerprint.
  std::string s = "passes off:";
  for (const std::string& p : disabled_passes) s += p + ",";
  if (!fault.empty()) s += ";fault:" + fault;  // faulty code never shares a key with good code
  // GPU code never shares a key with CPU code (the default target's keys as before)
  if (target != target_names().front()) s += ";target:" + target;
  return s;
}

const Config& process_config() {
  static const Config config = [] {
    Config c = Config::from_env();
    for (const std::string& w : c.warnings) std::fprintf(stderr, "lazyjit: warning: %s\n", w.c_str());
    debug::set_notice_level(c.notices == 0   ? debug::NoticeLevel::Off
                            : c.notices == 1 ? debug::NoticeLevel::Once
                                             : debug::NoticeLevel::Every);
    debug::Metrics::get().set_features(c.target != target_names().front(), !c.remote_cache.empty());
    return c;
  }();
  return config;
}

}  // namespace lazyjit::runtime
