// A module of kernels (each emitted by a LoopEmitter, loop_emitter.h), then the
// module's optimization pipeline.
#include "targets/cpu/codegen.h"

#include <stdexcept>

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/PassInstrumentation.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>

#include "targets/cpu/loop_emitter.h"
#include "lowering/interrupt.h"
#include "targets/llvm_file.h"

namespace lazyjit::lowering::cpu {

using emit::LoopEmitter;

namespace {

void emit_into(llvm::Module& m, const ir::Graph& g, const FusedKernel& k, llvm::TargetMachine& tm,
               const CodegenConfig& cfg) {
  throw_if_interrupted();
  try {
    LoopEmitter(m, g, k, cfg, tm).emit();
    std::string err;
    llvm::raw_string_ostream os(err);
    for (const char* suffix : {".impl", ""})
      if (llvm::verifyFunction(*m.getFunction(k.name + cfg.symbol_suffix + suffix), &os))
        throw std::runtime_error("invalid IR: " + err);
  } catch (const std::exception& e) {
    throw std::runtime_error("kernel " + k.name + ": " + e.what());
  }
}

std::unique_ptr<llvm::Module> new_module(llvm::LLVMContext& ctx, llvm::TargetMachine& tm) {
  auto m = std::make_unique<llvm::Module>("lazyjit", ctx);
  m->setDataLayout(tm.createDataLayout());
  m->setTargetTriple(tm.getTargetTriple().str());
  return m;
}

}  // namespace

std::unique_ptr<llvm::Module> emit_kernel_module(llvm::LLVMContext& ctx, const ir::Graph& g,
                                                 const FusedKernel& k, llvm::TargetMachine& tm,
                                                 const CodegenConfig& cfg) {
  auto m = new_module(ctx, tm);
  emit_into(*m, g, k, tm, cfg);
  return m;
}

std::unique_ptr<llvm::Module> emit_module(llvm::LLVMContext& ctx, const ir::Graph& g,
                                          const Plan& plan, llvm::TargetMachine& tm,
                                          const CodegenConfig& cfg) {
  auto m = new_module(ctx, tm);
  for (const FusedKernel& k : plan.kernels) emit_into(*m, g, k, tm, cfg);
  return m;
}

void optimize_module(llvm::Module& m, llvm::TargetMachine& tm, const CodegenConfig& cfg) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = cfg.opts.opt_level >= 2;
  pto.SLPVectorization = cfg.opts.opt_level >= 2;
  // Ctrl-C skips the passes still to run; the caller then throws (interrupt.h).
  llvm::PassInstrumentationCallbacks pic;
  pic.registerShouldRunOptionalPassCallback([](llvm::StringRef, llvm::Any) { return !interrupt_requested(); });
  llvm::PassBuilder pb(&tm, pto, std::nullopt, &pic);

  llvm::Triple triple(m.getTargetTriple());
  llvm::TargetLibraryInfoImpl tlii(triple);
  if (cfg.libmvec && cfg.opts.vectorize_math)
    tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86, triple);
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });

  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);

  const llvm::OptimizationLevel level = optimization_level(cfg.opts.opt_level);
  llvm::ModulePassManager mpm = level == llvm::OptimizationLevel::O0
                                    ? pb.buildO0DefaultPipeline(level)
                                    : pb.buildPerModuleDefaultPipeline(level);
  mpm.run(m, mam);
  throw_if_interrupted();
}

}  // namespace lazyjit::lowering::cpu
