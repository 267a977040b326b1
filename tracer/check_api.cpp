// The compiled-vs-eager check's public API (lazyjit.h): the switch and repros.
#include <cstdlib>
#include <stdexcept>

#include "env/env.h"
#include "runtime/debug_runs/repro.h"
#include "runtime/runtime.h"
#include "tracer/lazyjit.h"

namespace lazyjit {

void check_graphs(bool on, const std::string& repro_dir) {
  sync();  // what was recorded before runs as it was asked then
  runtime::Runtime::get().set_check_graphs(on, repro_dir);
}

std::string run_repro(const std::string& dir) {
  runtime::Repro repro = runtime::read_repro(dir);
  // The switches that made the code: read once per process, so they must be
  // this process's already.
  for (const auto& [name, value] : repro.env) {
    const std::optional<std::string> now = env::find(name.c_str());
    if (!now || value != *now)
      throw std::runtime_error("lazyjit.repro: " + dir + " was written with " + name + "=" + value + " (env.txt), and " +
                               "this process has " + (now ? name + "=" + *now : name + " unset") +
                               "; run it with the switches of env.txt set (python -m lazyjit.repro DIR and "
                               "lazyjit-repro DIR do that)");
  }
  return runtime::Runtime::get().check_graph(repro.graph, repro.bindings);
}

}  // namespace lazyjit
