// Every LAZYJIT_* switch, read from the environment once, in one place. The
// runtime passes the parts each layer needs explicitly (lowering options,
// codegen options, dump directory, thread count); what changes generated code
// also feeds the cache key, from this same object, so the two cannot drift.
// The README's "Switches" table documents each field.
#pragma once
#include <string>
#include <vector>

namespace lazyjit::runtime {

struct Config {
  bool step_mode = false;                    // LAZYJIT_MODE=step: run each op eagerly (debug)
  std::string dump_dir;                      // LAZYJIT_DUMP=<dir>: graph, pass, plan, LLVM dumps
  std::vector<std::string> disabled_passes;  // LAZYJIT_DISABLE_PASSES=fold,cse,...
  int vector_bits = 512;                     // LAZYJIT_VECTOR_BITS: widest vectors on AVX-512 hosts
  int num_threads = 0;                       // LAZYJIT_NUM_THREADS; 0: torch.get_num_threads()

  static Config from_env();
  // The settings that change generated code, as text (a part of every cache key).
  std::string codegen_text() const;
};

// The process's configuration: Config::from_env() on first use, then fixed.
const Config& process_config();

}  // namespace lazyjit::runtime
