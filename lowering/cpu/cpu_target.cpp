// The host CPU target: codegen (codegen.h) + ORC (jit.h).
#include <llvm/Config/llvm-config.h>
#include <llvm/Support/raw_ostream.h>

#include <atomic>
#include <mutex>
#include <stdexcept>

#include "lowering/cpu/codegen.h"
#include "lowering/cpu/jit.h"
#include "lowering/target.h"

namespace lazyjit::lowering {

std::string CodegenOptions::str() const {
  return "O" + std::to_string(opt_level) + ",vecmath=" + (vectorize_math ? "1" : "0") +
         ",vbits=" + std::to_string(vector_bits);
}

namespace {

std::string module_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

class CpuCode : public CompiledCode {
 public:
  CpuCode(std::shared_ptr<cpu::Jit> jit, llvm::orc::ResourceTrackerSP rt, std::string ir)
      : jit_(std::move(jit)), rt_(std::move(rt)), ir_(std::move(ir)) {}
  ~CpuCode() override {
    // Frees the kernels' code; an error here has no one to report to.
    if (rt_)
      if (auto err = rt_->remove()) llvm::consumeError(std::move(err));
  }
  const std::string& llvm_ir() const override { return ir_; }

 private:
  std::shared_ptr<cpu::Jit> jit_;  // outlives the tracker
  llvm::orc::ResourceTrackerSP rt_;
  std::string ir_;
};

class CpuTarget : public Target {
 public:
  explicit CpuTarget(const CodegenOptions& opts) : opts_(opts) {}

  std::string fingerprint() const override {
    std::string fp = std::string("llvm ") + LLVM_VERSION_STRING + ";cpu " + cpu::host_cpu_name() +
                     ";features " + cpu::host_cpu_features() + ";" + opts_.str();
    // Whether libmvec is found changes the code; knowing needs the JIT.
    if (opts_.vectorize_math) fp += jit().has_libmvec() ? ",libmvec" : ",no-libmvec";
    return fp;
  }

  std::unique_ptr<CompiledCode> compile(const ir::Graph& g, Plan& plan) override {
    plan.kernel_fns.clear();
    if (plan.kernels.empty()) return std::make_unique<CpuCode>(nullptr, nullptr, std::string());
    cpu::Jit& j = jit();
    cpu::CodegenConfig cfg{opts_, j.has_libmvec(), ".m" + std::to_string(next_module_++)};
    auto tm = j.make_target_machine();
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto m = cpu::emit_module(*ctx, g, plan, *tm, cfg);
    std::string ir = "; ---- before optimization\n" + module_text(*m);
    cpu::optimize_module(*m, *tm, cfg);
    ir += "; ---- after optimization\n" + module_text(*m);

    auto rt = j.add_module(llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx)));
    auto code = std::make_unique<CpuCode>(jit_, rt, std::move(ir));
    std::vector<KernelFn> fns;
    for (const FusedKernel& k : plan.kernels) {
      try {
        fns.push_back(reinterpret_cast<KernelFn>(j.lookup(k.name + cfg.symbol_suffix)));
      } catch (const std::exception& e) {
        throw std::runtime_error("kernel " + k.name + ": " + e.what());
      }
    }
    plan.kernel_fns = std::move(fns);
    return code;
  }

 private:
  // Created on first use so that an empty plan never touches LLVM.
  cpu::Jit& jit() const {
    std::call_once(jit_once_, [this] { jit_ = cpu::Jit::Create(); });
    return *jit_;
  }

  CodegenOptions opts_;
  std::atomic<uint64_t> next_module_{0};
  mutable std::once_flag jit_once_;
  mutable std::shared_ptr<cpu::Jit> jit_;
};

}  // namespace

std::unique_ptr<Target> make_cpu_target(const CodegenOptions& opts) {
  return std::make_unique<CpuTarget>(opts);
}

}  // namespace lazyjit::lowering
