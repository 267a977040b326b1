#include "targets/cuda/ptx.h"

#include "targets/llvm_file.h"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/PassInstrumentation.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Triple.h>

#include <mutex>
#include <stdexcept>

#include "lowering/interrupt.h"

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

namespace lazyjit::lowering::cuda {

namespace {

int arch_number(const std::string& arch, bool* accel = nullptr) {
  int n = 0;
  size_t i = 3;
  bool ok = arch.size() > 3 && arch.compare(0, 3, "sm_") == 0;
  for (; ok && i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) n = n * 10 + (arch[i] - '0');
  bool a = ok && i + 1 == arch.size() && arch[i] == 'a';
  ok = ok && i > 3 && (i == arch.size() || a) && n > 0;
  if (!ok) throw std::runtime_error("lazyjit: CUDA target: \"" + arch + "\" is not a GPU architecture (sm_80, sm_90, ...)");
  if (accel) *accel = a;
  return n;
}

}  // namespace

int ptx_isa(const std::string& arch) { return arch_number(arch) >= 70 ? 81 : 78; }

int max_param_bytes(const std::string& arch, int isa) {
  return isa >= 81 && arch_number(arch) >= 70 ? 32764 : 4096;
}

std::string ptx_isa_text(int isa) { return std::to_string(isa / 10) + "." + std::to_string(isa % 10); }

std::unique_ptr<llvm::TargetMachine> make_target_machine(const std::string& arch, int opt_level) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  const int isa = ptx_isa(arch);
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(kTriple, err);
  if (!t) throw std::runtime_error("lazyjit: CUDA target: LLVM has no NVPTX back end: " + err);
  // Asked first: an unknown CPU makes createTargetMachine warn on stderr.
  std::unique_ptr<llvm::MCSubtargetInfo> sti(t->createMCSubtargetInfo(kTriple, "", ""));
  if (!sti || !sti->isCPUStringValid(arch))
    throw std::runtime_error("lazyjit: CUDA target: LLVM " LLVM_VERSION_STRING
                             "'s NVPTX back end cannot make code for " + arch +
                             " (it knows sm_20 to sm_90a; a newer GPU runs sm_90 PTX through its driver)");
  llvm::TargetOptions to;
  llvm::CodeGenOptLevel level = opt_level <= 0   ? llvm::CodeGenOptLevel::None
                                : opt_level == 1 ? llvm::CodeGenOptLevel::Less
                                : opt_level == 2 ? llvm::CodeGenOptLevel::Default
                                                 : llvm::CodeGenOptLevel::Aggressive;
  std::unique_ptr<llvm::TargetMachine> tm(t->createTargetMachine(
      kTriple, arch, "+ptx" + std::to_string(isa), to, std::nullopt, std::nullopt, level));
  if (!tm) throw std::runtime_error("lazyjit: CUDA target: cannot make an NVPTX target machine for " + arch);
  return tm;
}

std::unique_ptr<llvm::Module> new_module(llvm::LLVMContext& ctx, llvm::TargetMachine& tm, const std::string& name) {
  auto m = std::make_unique<llvm::Module>(name, ctx);
  m->setTargetTriple(tm.getTargetTriple().str());
  m->setDataLayout(tm.createDataLayout());
  return m;
}

void optimize(llvm::Module& m, llvm::TargetMachine& tm, int opt_level) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  llvm::PassInstrumentationCallbacks pic;
  pic.registerShouldRunOptionalPassCallback([](llvm::StringRef, llvm::Any) { return !interrupt_requested(); });
  // With the target machine, PassBuilder asks NVPTX for its passes
  // (NVPTXTargetMachine::registerPassBuilderCallbacks: NVVMReflect, ...).
  llvm::PassBuilder pb(&tm, pto, std::nullopt, &pic);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  const llvm::OptimizationLevel level = optimization_level(opt_level);
  llvm::ModulePassManager mpm =
      level == llvm::OptimizationLevel::O0 ? pb.buildO0DefaultPipeline(level) : pb.buildPerModuleDefaultPipeline(level);
  mpm.run(m, mam);
  throw_if_interrupted();
}

std::string emit_ptx(llvm::Module& m, llvm::TargetMachine& tm) {
  return emit_file(m, tm, llvm::CodeGenFileType::AssemblyFile,
                   "lazyjit: CUDA target: the NVPTX target machine cannot emit PTX");
}

}  // namespace lazyjit::lowering::cuda
