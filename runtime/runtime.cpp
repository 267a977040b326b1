// The runtime's construction: the target LAZYJIT_TARGET names (checked here,
// so that a missing CUDA build, driver or GPU is one clear error at the first
// op), the compile cache's size, the disk tier and the background compiler.
// What a sync does with them is runtime/pipeline.cpp.
#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

#include "cuda_driver/driver.h"
#include "debug/trace.h"
#include "executor/gemm.h"
#include "executor/graph_replays.h"
#include "graph_ir/hash.h"
#include "lowering/compile_threads.h"
#include "lowering/cuda_sim/sim_target.h"
#include "lowering/lower.h"
#include "runtime/disk_tier.h"
#include "runtime/runtime.h"

namespace lazyjit::runtime {

namespace {

// LAZYJIT_TARGET: the host CPU, or the GPU PyTorch uses (its CUDA build, the
// driver, a GPU: each checked here, so that a missing one is one clear error
// at the first op, not a failure in the first compile or launch).
std::unique_ptr<lowering::Target> make_target(const Config& config, const lowering::CodegenOptions& codegen) {
  if (config.target == "cuda-sim") return lowering::make_cuda_sim_target(codegen);
  if (config.target != "cuda") return lowering::make_cpu_target(codegen);
  // PyTorch first: with a CPU-only build no driver or GPU would help.
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA))
    throw std::runtime_error("LAZYJIT_TARGET=cuda needs a CUDA build of PyTorch; this one (" TORCH_VERSION
                             ") is CPU-only");
  std::string why;
  if (!cuda_driver::available(&why)) throw std::runtime_error("LAZYJIT_TARGET=cuda: no CUDA GPU is usable: " + why);
  lowering::CudaOptions cuda;
  cuda.codegen = codegen;
  std::unique_ptr<lowering::Target> target;
  try {
    target = lowering::make_cuda_target(cuda);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("LAZYJIT_TARGET=cuda: ") + e.what());
  }
  // Programs run on the GPU PyTorch has current (its results, ATen steps'
  // devices, the tracer's storages: executor/execution_device.h).
  executor::set_execution_device(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice());
  return target;
}

}  // namespace

Runtime& Runtime::get() {
  static Runtime* rt = new Runtime(process_config());  // outlives static tensors
  return *rt;
}

Runtime::Runtime(Config config) : config_(std::move(config)) {
  cache_.set_capacity(static_cast<size_t>(config_.max_programs));
  executor::set_small_gemm_enabled(config_.small_gemm);
  executor::set_cuda_graphs_enabled(config_.cuda_graphs);
  binder_.set_aten_device(aten_device());
  lowering::CodegenOptions codegen;
  codegen.vector_bits = config_.vector_bits;
  codegen.opt_level = config_.opt_level;
  codegen.fault = config_.fault;
  // The text of every module costs memory, its assembly a second codegen:
  // only when dumping them (LAZYJIT_DUMP, LAZYJIT_DEBUG=3; not at level 2).
  codegen.keep_llvm_ir = codegen.keep_asm = !config_.dump_dir.empty() && config_.dump_llvm;
  target_ = make_target(config_, codegen);
  // Everything that changes the code a key stands for.
  code_fingerprint_ = target_->fingerprint() + ";lazyjit " LAZYJIT_VERSION ";" + config_.codegen_text();
  code_hash_ = ir::hash64(code_fingerprint_.data(), code_fingerprint_.size());
  const std::string checked = code_fingerprint_ + ";checked stores";
  checked_code_hash_ = ir::hash64(checked.data(), checked.size());
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
  explainer_.set_dynamic(config_.dynamic != lowering::Shapes::Off);
  debug_nans_ = config_.debug_nans;
  check_graphs_ = config_.check_graphs;
  // LAZYJIT_TRACE: Chrome trace events, written at exit (debug/trace.h).
  if (!config_.trace_file.empty() && debug::trace_path().empty()) debug::start_trace(config_.trace_file);
}

Runtime::~Runtime() = default;

}  // namespace lazyjit::runtime
