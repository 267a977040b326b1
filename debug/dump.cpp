#include "debug/dump.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace lazyjit::debug {

namespace {

std::atomic<bool> g_told{false};

// A dump that cannot be written is said once per process (the next ones would
// say the same, once per compiled program), naming the path and the OS error.
void tell_once(const std::string& path, const std::string& why) {
  if (g_told.exchange(true)) return;
  std::fprintf(stderr,
               "lazyjit: warning: cannot write dumps (LAZYJIT_DUMP, LAZYJIT_DEBUG>=2): %s: %s; dumps are not "
               "written (said once)\n",
               path.c_str(), why.c_str());
}

}  // namespace

void write_dump(const std::string& dir, const std::string& name, const std::string& content) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return tell_once(dir, ec.message());
  std::string path = (std::filesystem::path(dir) / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return tell_once(path, std::strerror(errno));
  bool ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  int err = ok ? 0 : errno;
  if (std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (!ok) tell_once(path, std::strerror(err));
}

}  // namespace lazyjit::debug
