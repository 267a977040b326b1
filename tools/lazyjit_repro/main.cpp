// lazyjit-repro DIR: reruns the compiled-vs-eager check of a repro directory
// (written by LAZYJIT_CHECK=1 / lazyjit::check_graphs; runtime/debug_runs/repro.h) and
// says whether the mismatch reproduces. The exit statuses are
// runtime::kReproExitStatus (the same as python -m lazyjit.repro's).
//
// The directory is data: env.txt may set only the switches a repro carries
// (runtime::repro_switches), each validated; any other name is never applied.
// lazyjit reads its switches once, when it loads (before main), so when
// env.txt's differ from this process's the runner sets them and re-executes
// itself, once: the re-executed process is marked and never re-executes.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "env/env.h"
#include "runtime/debug_runs/repro.h"
#include "tracer/lazyjit.h"

namespace {

namespace rt = lazyjit::runtime;
namespace env = lazyjit::env;

// Set in the re-executed process only (not a LAZYJIT_* name: lazyjit's config
// would call it an unknown switch).
const char kReexecuted[] = "_LAZYJIT_REPRO_REEXECUTED";

int usage() {
  std::fprintf(stderr,
               "usage: lazyjit-repro DIR\n"
               "  reruns the compiled-vs-eager check a repro directory holds, with the switches of DIR/env.txt.\n"
               "  env.txt may set only the switches a repro carries (");
  const auto& names = rt::repro_switches();
  for (size_t i = 0; i < names.size(); ++i) std::fprintf(stderr, "%s%s", i ? ", " : "", names[i].c_str());
  std::fprintf(stderr,
               "),\n"
               "  each to a value lazyjit takes; a line setting a name that is not LAZYJIT_* (PYTHONPATH,\n"
               "  LD_PRELOAD, ...) is ignored, with a warning. Other switches come from your own environment.\n"
               "%s\n",
               rt::kReproExitStatus);
  return rt::kReproBadDirectory;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") return usage();
  std::string dir = argv[1];
  const bool reexecuted = env::find(kReexecuted).has_value();
  env::unset(kReexecuted);
  try {
    rt::Repro repro = rt::read_repro(dir);  // the whole directory, checked before anything runs
    if (!reexecuted)
      for (const std::string& w : repro.env_warnings) std::fprintf(stderr, "%s\n", w.c_str());
    bool differ = false;
    for (const auto& [name, value] : repro.env) {
      const std::optional<std::string> now = env::find(name.c_str());
      differ |= !now || value != *now;
    }
    if (differ && !reexecuted) {
      for (const auto& [name, value] : repro.env) env::set(name.c_str(), value);
      env::set(kReexecuted, "1");
      std::fflush(nullptr);
      execv("/proc/self/exe", argv);
      std::perror("lazyjit-repro: re-executing with env.txt's switches");
      return rt::kReproBadDirectory;
    }
    // Re-executed and still different: lazyjit::run_repro says which switch.
    std::string report = lazyjit::run_repro(dir);
    if (report.empty()) {
      std::printf("lazyjit-repro: no mismatch: compiled and eager agree on every op of %s\n", dir.c_str());
      return rt::kReproAgree;
    }
    std::printf("lazyjit-repro: reproduced: %s\n", report.c_str());
    return rt::kReproReproduced;
  } catch (const rt::MalformedRepro& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return rt::kReproMalformed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return rt::kReproBadDirectory;
  }
}
