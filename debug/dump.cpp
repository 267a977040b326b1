#include "debug/dump.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace lazyjit::debug {

namespace {
std::string& dir_storage() {
  static std::string dir = [] {
    const char* e = std::getenv("LAZYJIT_DUMP");
    return std::string(e ? e : "");
  }();
  return dir;
}
}  // namespace

const std::string& dump_dir() { return dir_storage(); }
void set_dump_dir(const std::string& dir) { dir_storage() = dir; }

void write_dump(const std::string& name, const std::string& content) {
  const std::string& dir = dump_dir();
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream f(std::filesystem::path(dir) / name);
  f << content;
}

}  // namespace lazyjit::debug
