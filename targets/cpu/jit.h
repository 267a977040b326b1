// A small ORC LLJIT wrapper for the host CPU, in the style of LLVM's
// KaleidoscopeJIT. It links object files (compiled by codegen.h, or read back
// from a program's bytes): each into a JITDylib of its own, so that two programs
// may hold the same symbol names and each one's code is freed with it. Unresolved
// symbols (libm, libmvec) resolve through the main JITDylib's generators.
// Thread-safe: ORC serializes symbol-table updates.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/Target/TargetMachine.h>

namespace lazyjit::lowering::cpu {

class Jit {
 public:
  // Throws std::runtime_error when the host cannot be targeted.
  static std::shared_ptr<Jit> Create();

  // A fresh TargetMachine for the host, for running the optimization pipeline
  // (TargetMachines are not thread-safe, so each compile makes its own).
  std::unique_ptr<llvm::TargetMachine> make_target_machine() const;
  const llvm::DataLayout& data_layout() const { return jit_->getDataLayout(); }
  const llvm::Triple& triple() const { return jit_->getTargetTriple(); }
  // libmvec was found, so vectorized math calls can be resolved.
  bool has_libmvec() const { return has_libmvec_; }

  // Links `object` into a new JITDylib. Throws std::runtime_error on failure.
  llvm::orc::JITDylib& add_object(const std::string& object);
  // Address of a symbol of `jd`; throws std::runtime_error if missing.
  uint64_t lookup(llvm::orc::JITDylib& jd, const std::string& name);
  // Frees `jd`'s code. Never throws.
  void remove(llvm::orc::JITDylib& jd);

 private:
  Jit() = default;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::unique_ptr<llvm::orc::JITTargetMachineBuilder> jtmb_;
  bool has_libmvec_ = false;
  std::atomic<uint64_t> next_dylib_{0};
};

// Host CPU name and its enabled features ("+avx2,+fma,..."), sorted.
std::string host_cpu_name();
std::string host_cpu_features();

}  // namespace lazyjit::lowering::cpu
