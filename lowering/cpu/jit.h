// A small ORC LLJIT wrapper for the host CPU, in the style of LLVM's
// KaleidoscopeJIT. Every module gets its own ResourceTracker so that its code is
// freed when the CompiledCode that owns it dies. Thread-safe: ORC serializes
// symbol-table updates and compiles concurrently with a TargetMachine per job.
#pragma once
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

  llvm::orc::ResourceTrackerSP add_module(llvm::orc::ThreadSafeModule m);
  // Address of a symbol of an added module; throws std::runtime_error if missing.
  uint64_t lookup(const std::string& name);

 private:
  Jit() = default;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::unique_ptr<llvm::orc::JITTargetMachineBuilder> jtmb_;
  bool has_libmvec_ = false;
};

// Host CPU name and its enabled features ("+avx2,+fma,..."), sorted.
std::string host_cpu_name();
std::string host_cpu_features();

}  // namespace lazyjit::lowering::cpu
