#include "targets/cpu/jit.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/TargetParser/Host.h>

namespace lazyjit::lowering::cpu {
namespace {

[[noreturn]] void fail(const std::string& what, llvm::Error err) {
  throw std::runtime_error("lazyjit jit: " + what + ": " + llvm::toString(std::move(err)));
}

template <typename T>
T check(const std::string& what, llvm::Expected<T> v) {
  if (!v) fail(what, v.takeError());
  return std::move(*v);
}

void init_llvm_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

}  // namespace

std::shared_ptr<Jit> Jit::Create() {
  init_llvm_once();
  std::shared_ptr<Jit> self(new Jit());
  auto jtmb = check("detect host", llvm::orc::JITTargetMachineBuilder::detectHost());
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  self->jtmb_ = std::make_unique<llvm::orc::JITTargetMachineBuilder>(jtmb);
  // Concurrent compilation: a TargetMachine per compile job, so that several
  // threads may add and look up modules at once.
  self->jit_ = check("create LLJIT", llvm::orc::LLJITBuilder()
                                         .setJITTargetMachineBuilder(std::move(jtmb))
                                         .setSupportConcurrentCompilation(true)
                                         .create());
  auto& main = self->jit_->getMainJITDylib();
  char prefix = self->jit_->getDataLayout().getGlobalPrefix();
  // Symbols of the process itself (libm: expf, tanhf, erff, ...).
  main.addGenerator(check("process symbols",
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix)));
  // glibc's vector math library; without it, math stays scalar (see codegen).
  if (auto mvec = llvm::orc::DynamicLibrarySearchGenerator::Load("libmvec.so.1", prefix)) {
    main.addGenerator(std::move(*mvec));
    self->has_libmvec_ = true;
  } else {
    llvm::consumeError(mvec.takeError());
  }
  return self;
}

std::unique_ptr<llvm::TargetMachine> Jit::make_target_machine() const {
  return check("create target machine", jtmb_->createTargetMachine());
}

llvm::orc::JITDylib& Jit::add_object(const std::string& object) {
  auto& es = jit_->getExecutionSession();
  auto created = es.createJITDylib("lazyjit.p" + std::to_string(next_dylib_++));
  if (!created) fail("create dylib", created.takeError());
  llvm::orc::JITDylib& jd = *created;
  jd.addToLinkOrder(jit_->getMainJITDylib());
  auto buf = llvm::MemoryBuffer::getMemBufferCopy(object, jd.getName());
  if (auto err = jit_->addObjectFile(jd, std::move(buf))) {
    remove(jd);
    fail("add object", std::move(err));
  }
  return jd;
}

uint64_t Jit::lookup(llvm::orc::JITDylib& jd, const std::string& name) {
  auto addr = check("lookup " + name, jit_->lookup(jd, name));
  return addr.getValue();
}

void Jit::remove(llvm::orc::JITDylib& jd) {
  // An error here has no one to report to.
  if (auto err = jit_->getExecutionSession().removeJITDylib(jd)) llvm::consumeError(std::move(err));
}

std::string host_cpu_name() { return llvm::sys::getHostCPUName().str(); }

std::string host_cpu_features() {
  std::vector<std::string> on;
  for (const auto& f : llvm::sys::getHostCPUFeatures())
    if (f.getValue()) on.push_back("+" + f.getKey().str());
  std::sort(on.begin(), on.end());
  std::string out;
  for (const auto& f : on) out += (out.empty() ? "" : ",") + f;
  return out;
}

}  // namespace lazyjit::lowering::cpu
