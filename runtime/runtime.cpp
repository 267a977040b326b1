// The runtime's construction: the backend LAZYJIT_TARGET names (runtime/backend.h:
// a missing CUDA build, driver or GPU is one clear error at the first op) and
// its compile target, the compile cache's size, the disk tier, the background
// compiler and the tier list (pipeline.cpp).
// What a sync does with them is runtime/pipeline.cpp.
#include <ATen/Parallel.h>

#include <atomic>
#include <cstdio>

#include "debug/trace.h"
#include "executor/gemm.h"
#include "graph_ir/hash.h"
#include "lowering/compile_threads.h"
#include "lowering/lower.h"
#include "runtime/backend.h"
#include "runtime/background_compiles.h"
#include "runtime/compiler.h"
#include "runtime/debug_runs/debug_runs.h"
#include "runtime/disk_tier.h"
#include "runtime/op_by_op.h"
#include "runtime/runtime.h"
#include "runtime/tiers.h"

namespace lazyjit::runtime {

namespace {
std::atomic<Runtime*> g_started{nullptr};
}

Runtime& Runtime::get() {
  static Runtime* rt = [] {
    auto* r = new Runtime(process_config());  // outlives static tensors
    g_started.store(r, std::memory_order_release);
    return r;
  }();
  return *rt;
}

Runtime* Runtime::if_started() { return g_started.load(std::memory_order_acquire); }

Runtime::Runtime(Config config) : config_(std::move(config)), policy_(config_) {
  cache_.set_capacity(static_cast<size_t>(config_.max_programs));
  executor::set_small_gemm_enabled(config_.small_gemm);
  lowering::CodegenOptions codegen;
  codegen.vector_bits = config_.vector_bits;
  codegen.opt_level = config_.opt_level;
  codegen.fault = config_.fault;
  // The text of every module costs memory, its assembly a second codegen:
  // only when dumping them (LAZYJIT_DUMP, LAZYJIT_DEBUG=3; not at level 2).
  codegen.keep_llvm_ir = codegen.keep_asm = !config_.dump_dir.empty() && config_.dump_llvm;
  backend_ = make_backend(config_);
  binder_.set_pass_rules(backend_->pass_rules());
  target_ = backend_->make_target(codegen);
  execution_ = backend_->execution(config_.cuda_graphs);
  // Everything that changes the code a key stands for.
  code_fingerprint_ = backend_->fingerprint(*target_) + ";lazyjit " LAZYJIT_VERSION ";" + config_.codegen_text();
  code_hash_ = ir::hash64(code_fingerprint_.data(), code_fingerprint_.size());
  const std::string checked = code_fingerprint_ + ";checked stores";
  checked_code_hash_ = ir::hash64(checked.data(), checked.size());
  compiler_ = std::make_unique<Compiler>(config_, *backend_, *target_);
  op_by_op_ = std::make_unique<OpByOpRuns>(config_, *target_, execution_);
  debug_ = std::make_unique<DebugRuns>(config_.debug_nans, config_.check_graphs, *op_by_op_, execution_.device);
  disk_ = DiskTier::open(config_, code_fingerprint_, *target_);
  if (config_.background_compile) {
    background_ = std::make_unique<BackgroundCompiles>();
    // What it compiles goes to disk for the next process: finished even at exit.
    background_->finish_queued_at_stop(disk_ != nullptr);
    // The compiler's first use (LLVM's JIT, passes, code generator) on the
    // worker now, while the program is still being set up, not at its first
    // compile beside the program's first op-by-op syncs.
    background_->warm_up([t = target_.get()] {
      lowering::NoPollScope no_poll;
      lowering::SerialCompileScope serial;
      t->warm_up();
    });
  }
  tiers_ = tiers(TierParts{config_, cache_, execution_, binder_, disk_.get(), background_.get(), *compiler_, policy_});
  // LAZYJIT_TRACE: Chrome trace events, written at exit (debug/trace.h).
  // A path that cannot be written, or is not a regular file (a FIFO would block
  // the process until a reader comes), is one warning, and tracing stays off.
  if (!config_.trace_file.empty() && debug::trace_path().empty()) {
    std::string error;
    if (!debug::start_trace(config_.trace_file, &error))
      std::fprintf(stderr, "lazyjit: warning: LAZYJIT_TRACE: %s; tracing is off\n", error.c_str());
  }
}

Runtime::~Runtime() = default;

}  // namespace lazyjit::runtime
