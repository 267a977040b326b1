#include "tracer/call_site.h"

#include <dlfcn.h>
#include <execinfo.h>

#include <cstdio>
#include <mutex>
#include <unordered_map>

namespace lazyjit::tracer {

namespace {

bool internal_object(const std::string& path) {
  for (const char* lib : {"liblazyjit", "libtorch", "libc10", "libc.so", "libstdc++", "libgcc",
                          "libpython", "_C.", "libtbb"})
    if (path.find(lib) != std::string::npos) return true;
  return false;
}

bool internal_source(const std::string& file) {
  return file.empty() || file[0] == '?' || file.find("/torch/include/") != std::string::npos ||
         file.rfind("/usr/include/", 0) == 0 || file.find("/tracer/") != std::string::npos;
}

// The innermost user source line of an address: with inlining, the chain runs
// from the inlined library header out to the caller that inlined it.
std::string addr2line(const std::string& object, uintptr_t offset) {
  char cmd[1024];
  std::snprintf(cmd, sizeof cmd, "addr2line -i -e '%s' 0x%lx 2>/dev/null", object.c_str(),
                static_cast<unsigned long>(offset));
  FILE* p = popen(cmd, "r");
  if (!p) return {};
  char buf[1024];
  std::string site;
  while (fgets(buf, sizeof buf, p)) {
    std::string line = buf;
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    auto disc = line.find(" (discriminator");
    if (disc != std::string::npos) line.resize(disc);
    if (site.empty() && !internal_source(line)) site = line;
  }
  pclose(p);
  return site;
}

}  // namespace

std::string cpp_call_site() {
  void* frames[64];
  int n = backtrace(frames, 64);
  for (int i = 1; i < n; ++i) {
    Dl_info info;
    if (!dladdr(frames[i], &info) || !info.dli_fname) continue;
    std::string object = info.dli_fname;
    if (internal_object(object)) continue;
    static std::mutex mu;
    static std::unordered_map<void*, std::string> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(frames[i]);
    if (it != cache.end()) {
      if (it->second.empty()) continue;
      return it->second;
    }
    uintptr_t addr = reinterpret_cast<uintptr_t>(frames[i]) - 1;  // inside the call
    uintptr_t offset = addr - reinterpret_cast<uintptr_t>(info.dli_fbase);
    std::string site = cache[frames[i]] = addr2line(object, offset);
    if (!site.empty()) return site;
  }
  return {};
}

}  // namespace lazyjit::tracer
