// The host CPU target: codegen (codegen.h) + ORC (jit.h).
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LegacyPassManager.h>
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

// Emits `m` as a relocatable object file for `tm`'s machine.
std::string object_file(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw std::runtime_error("lazyjit: the target machine cannot emit object files");
  pm.run(m);
  return std::string(buf.data(), buf.size());
}

class CpuCode : public CompiledCode {
 public:
  CpuCode(std::shared_ptr<cpu::Jit> jit, llvm::orc::JITDylib* jd, std::string object, std::string ir)
      : jit_(std::move(jit)), jd_(jd), object_(std::move(object)), ir_(std::move(ir)) {}
  ~CpuCode() override {
    if (jd_) jit_->remove(*jd_);
  }
  const std::string& object() const override { return object_; }
  const std::string& llvm_ir() const override { return ir_; }

 private:
  std::shared_ptr<cpu::Jit> jit_;  // outlives the dylib
  llvm::orc::JITDylib* jd_;
  std::string object_;
  std::string ir_;
};

class CpuTarget : public Target {
 public:
  explicit CpuTarget(const CodegenOptions& opts) : opts_(opts) {}

  std::string fingerprint() const override {
    std::string fp = std::string("llvm ") + LLVM_VERSION_STRING + ";cpu " + cpu::host_cpu_name() +
                     ";features " + cpu::host_cpu_features() + ";rev " + std::to_string(kCodegenRevision) + ";" +
                     opts_.str();
    // Whether libmvec is found changes the code; knowing needs the JIT.
    if (opts_.vectorize_math) fp += jit().has_libmvec() ? ",libmvec" : ",no-libmvec";
    return fp;
  }

  std::unique_ptr<CompiledCode> compile(const ir::Graph& g, Plan& plan) override {
    plan.kernel_fns.clear();
    if (plan.kernels.empty()) return std::make_unique<CpuCode>(nullptr, nullptr, std::string(), std::string());
    cpu::Jit& j = jit();
    // Each object is linked into a JITDylib of its own: kernel names need no suffix.
    cpu::CodegenConfig cfg{opts_, j.has_libmvec(), ""};
    auto tm = j.make_target_machine();
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto m = cpu::emit_module(*ctx, g, plan, *tm, cfg);
    std::string ir;
    if (opts_.keep_llvm_ir) ir = "; ---- before optimization\n" + module_text(*m);
    cpu::optimize_module(*m, *tm, cfg);
    if (opts_.keep_llvm_ir) ir += "; ---- after optimization\n" + module_text(*m);
    return link(object_file(*m, *tm), std::move(ir), plan);
  }

  std::unique_ptr<CompiledCode> load(const std::string& object, Plan& plan) override {
    plan.kernel_fns.clear();
    if (plan.kernels.empty()) return std::make_unique<CpuCode>(nullptr, nullptr, std::string(), std::string());
    return link(object, std::string(), plan);
  }

 private:
  std::unique_ptr<CompiledCode> link(std::string object, std::string ir, Plan& plan) {
    cpu::Jit& j = jit();
    llvm::orc::JITDylib& jd = j.add_object(object);
    auto code = std::make_unique<CpuCode>(jit_, &jd, std::move(object), std::move(ir));
    std::vector<KernelFn> fns;
    for (const FusedKernel& k : plan.kernels) {
      try {
        fns.push_back(reinterpret_cast<KernelFn>(j.lookup(jd, k.name)));
      } catch (const std::exception& e) {
        throw std::runtime_error("kernel " + k.name + ": " + e.what());
      }
    }
    plan.kernel_fns = std::move(fns);
    return code;
  }

  // Created on first use so that an empty plan never touches LLVM.
  cpu::Jit& jit() const {
    std::call_once(jit_once_, [this] { jit_ = cpu::Jit::Create(); });
    return *jit_;
  }

  CodegenOptions opts_;
  mutable std::once_flag jit_once_;
  mutable std::shared_ptr<cpu::Jit> jit_;
};

}  // namespace

std::unique_ptr<Target> make_cpu_target(const CodegenOptions& opts) {
  return std::make_unique<CpuTarget>(opts);
}

}  // namespace lazyjit::lowering
