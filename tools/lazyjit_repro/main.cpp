// lazyjit-repro DIR: reruns the compiled-vs-eager check of a repro directory
// (written by LAZYJIT_CHECK=1 / lazyjit::check_graphs; runtime/repro.h) and
// says whether the mismatch reproduces. Exit status: 1 when it does, 0 when
// compiled and eager now agree, 2 on a bad directory.
//
// The switches in DIR/env.txt are read by lazyjit once, at load time, so the
// runner re-executes itself with them set before it runs anything.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tracer/lazyjit.h"

namespace {

// Sets env.txt's switches; true when one changed (then the process re-executes).
bool apply_env(const std::string& dir) {
  std::ifstream f(dir + "/env.txt");
  bool changed = false;
  for (std::string line; std::getline(f, line);) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string name = line.substr(0, eq), value = line.substr(eq + 1);
    const char* now = std::getenv(name.c_str());
    if (now && value == now) continue;
    setenv(name.c_str(), value.c_str(), 1);
    changed = true;
  }
  return changed;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: lazyjit-repro DIR\n  reruns the compiled-vs-eager check a repro directory holds\n");
    return 2;
  }
  std::string dir = argv[1];
  if (apply_env(dir)) {
    execv("/proc/self/exe", argv);
    std::perror("lazyjit-repro: re-executing with env.txt's switches");
    return 2;
  }
  try {
    std::string report = lazyjit::run_repro(dir);
    if (report.empty()) {
      std::printf("lazyjit-repro: no mismatch: compiled and eager agree on every op of %s\n", dir.c_str());
      return 0;
    }
    std::printf("lazyjit-repro: reproduced: %s\n", report.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
