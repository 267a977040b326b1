#include "runtime/config.h"

#include <algorithm>
#include <cstdlib>

namespace lazyjit::runtime {

namespace {

std::string env(const char* name) {
  const char* e = std::getenv(name);
  return e ? e : "";
}

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

}  // namespace

Config Config::from_env() {
  Config c;
  c.step_mode = env("LAZYJIT_MODE") == "step";
  c.dump_dir = env("LAZYJIT_DUMP");
  c.disabled_passes = split_commas(env("LAZYJIT_DISABLE_PASSES"));
  if (std::string bits = env("LAZYJIT_VECTOR_BITS"); !bits.empty()) c.vector_bits = std::atoi(bits.c_str());
  if (std::string n = env("LAZYJIT_NUM_THREADS"); !n.empty()) c.num_threads = std::max(1, std::atoi(n.c_str()));
  return c;
}

std::string Config::codegen_text() const {
  // Vector width reaches the code through the target's own fingerprint.
  std::string s = "passes off:";
  for (const std::string& p : disabled_passes) s += p + ",";
  return s;
}

const Config& process_config() {
  static const Config config = Config::from_env();
  return config;
}

}  // namespace lazyjit::runtime
