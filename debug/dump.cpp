#include "debug/dump.h"

#include <filesystem>
#include <fstream>

namespace lazyjit::debug {

void write_dump(const std::string& dir, const std::string& name, const std::string& content) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream f(std::filesystem::path(dir) / name);
  f << content;
}

}  // namespace lazyjit::debug
