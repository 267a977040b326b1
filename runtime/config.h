// Every LAZYJIT_* switch, read from the environment once, in one place. The
// runtime passes the parts each layer needs explicitly (lowering options,
// codegen options, dump directory, thread count); what changes generated code
// also feeds the cache key, from this same object, so the two cannot drift.
// docs/switches.md documents each field.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lowering/shapes.h"

namespace lazyjit::runtime {

enum class RecompileStance { Warn, Error, OpByOp };

struct Config {
  bool step_mode = false;                    // LAZYJIT_MODE=step: run each op eagerly (debug)
  // LAZYJIT_TARGET=cpu|cuda|cuda-sim: what kernels are compiled for: the host
  // CPU (LLVM ORC), NVIDIA GPUs (LLVM NVPTX, run on PyTorch's current CUDA
  // stream), or the CUDA target's kernels run on the host (a test target:
  // targets/cuda_sim/sim_target.h; data and ATen steps as under cpu).
  std::string target = "cpu";  // the default of runtime/backend.h's target_names()
  std::string dump_dir;                      // LAZYJIT_DUMP=<dir>: graph, pass, plan, LLVM dumps
  std::vector<std::string> disabled_passes;  // LAZYJIT_DISABLE_PASSES=fold,cse,...
  int vector_bits = 512;                     // LAZYJIT_VECTOR_BITS: widest vectors on AVX-512 hosts
  int opt_level = 3;                         // LAZYJIT_OPT_LEVEL: LLVM's pipeline (O0..O3)
  int num_threads = 0;                       // LAZYJIT_NUM_THREADS; 0: torch.get_num_threads()
  bool small_gemm = true;                    // LAZYJIT_SMALL_GEMM=off: decode-sized GEMMs keep ATen's mm
  // LAZYJIT_CUDA_GRAPHS=off: under the cuda target, replayable programs are not
  // captured as CUDA graphs (targets/cuda/graph_replays.h)
  bool cuda_graphs = true;
  bool log_recompiles = false;               // LAZYJIT_LOG=recompiles: say why, at each compile
  int recompile_limit = 8;                   // LAZYJIT_RECOMPILE_LIMIT: compiles per sync call site before...
  // ...LAZYJIT_ON_RECOMPILE_LIMIT: warn (once per site), error, or run that site's graphs op by op.
  RecompileStance on_recompile_limit = RecompileStance::Warn;
  // LAZYJIT_DYNAMIC=auto|off|all: exact kernels until a size changes, then
  // shape-generic (auto); exact only (off); shape-generic from the start (all).
  lowering::Shapes dynamic = lowering::Shapes::Auto;
  // LAZYJIT_BACKGROUND_COMPILE=on|off: a graph that misses every cache tier runs
  // op by op while its program compiles on a worker thread (runtime/background_compiles.h).
  bool background_compile = true;
  bool debug_nans = false;                   // LAZYJIT_DEBUG_NANS=1: pin a NaN/Inf to the op that made it
  bool check_graphs = false;                 // LAZYJIT_CHECK=1: every compiled value against eager's (runtime/debug_runs/graph_check.h)
  std::string fault;                         // LAZYJIT_FAULT=<op>: tests only: that op's generated code is wrong
  std::string trace_file;                    // LAZYJIT_TRACE=<file.json>: Chrome trace events (debug/trace.h)
  // LAZYJIT_DEBUG=0..4, one ladder over the switches above (each also on its own):
  // 1 sync and recompile log; 2 + graph, plan and DOT dumps (LAZYJIT_DUMP, else
  // ./lazyjit_debug); 3 + LLVM IR and assembly dumps; 4 + NaN checks and a per-op timing table.
  int debug_level = 0;
  bool log_syncs = false;                    // LAZYJIT_LOG=syncs (and level >= 1): one line per sync
  int notices = 1;  // LAZYJIT_LOG: 0 `none` (no notices), 1 each once (default), 2 `fallbacks` (every fallback said)
  bool dump_llvm = true;                     // with dump_dir: LLVM IR and assembly too (level 2: not)
  bool op_timing = false;                    // level 4: per-op timing table at exit
  int64_t max_graph_ops = 10000;             // LAZYJIT_MAX_GRAPH_OPS: a graph this big is cut and run
  int64_t max_programs = 256;                // LAZYJIT_MAX_PROGRAMS: programs kept in memory (LRU)
  // The on-disk compile cache (runtime/disk_tier.h).
  bool disk_cache = true;                    // LAZYJIT_CACHE=off turns it off
  std::string cache_dir;                     // LAZYJIT_CACHE_DIR, else $XDG_CACHE_HOME/lazyjit, else ~/.cache/lazyjit
  uint64_t cache_max_bytes = 2ull << 30;     // LAZYJIT_CACHE_MAX_BYTES: least recently used entries go past it
  std::string cache_secret;                  // LAZYJIT_CACHE_SECRET: sign entries (HMAC-SHA256), load only signed ones
  // The remote tier on Redis (runtime/remote_tier.h), behind the disk tier.
  std::string remote_cache;                  // LAZYJIT_REMOTE_CACHE=redis://host:port/db; empty: off
  int remote_timeout_ms = 100;               // LAZYJIT_REMOTE_TIMEOUT_MS: each remote call, whole reply included
  uint64_t remote_max_entry_bytes = 64ull << 20;  // LAZYJIT_REMOTE_MAX_ENTRY_BYTES: larger entries neither sent nor read

  // Problems found reading the environment: a malformed or unknown value gets
  // one warning (printed once, by process_config) and the default.
  std::vector<std::string> warnings;

  static Config from_env();
  // The same, with each switch's value from `env` ("" when unset); no check for
  // unknown LAZYJIT_* names (from_env adds that).
  static Config from(const std::function<std::string(const char*)>& env);
  // Whether `name` is a switch this config reads (docs/switches.md).
  static bool is_switch(const std::string& name);
  // "" when `value` is a value switch `name` takes, else why not: the warning
  // from_env would give, less its fallback (e.g. "LAZYJIT_VECTOR_BITS=7 is not
  // 128, 256 or 512"). The repro runners validate env.txt with it (runtime/debug_runs/repro.h).
  static std::string check_switch(const std::string& name, const std::string& value);
  // The settings that change generated code, as text (a part of every cache key).
  std::string codegen_text() const;
};

// The process's configuration: Config::from_env() on first use, then fixed.
const Config& process_config();

}  // namespace lazyjit::runtime
