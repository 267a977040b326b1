// A compilation target: turns a Plan's fused kernels into callable code. The CPU
// (LLVM ORC) is the one target today; an accelerator would be a second subclass.
#pragma once
#include <memory>
#include <string>

#include "lowering/plan.h"

namespace lazyjit::lowering {

struct CodegenOptions {
  int opt_level = 3;
  bool vectorize_math = true;  // map vectorized exp/log/... onto glibc's libmvec
  // AVX-512 hosts: prefer 512-bit vectors (LLVM's default there is 256). The
  // device reads LAZYJIT_VECTOR_BITS (e.g. 256, to compare).
  int vector_bits = 512;
  // Keep each module's LLVM IR as text (CompiledCode::llvm_ir) for dumps and
  // tests; off in the runtime unless dumping. Not part of the fingerprint.
  bool keep_llvm_ir = true;
  std::string str() const;
};

// A plan's kernels as a relocatable object file, loaded into the JIT: keeps the
// code alive; a Plan's kernel_fns are valid while it lives.
class CompiledCode {
 public:
  virtual ~CompiledCode() = default;
  // The object file (what a program's bytes carry; Target::load takes it back).
  virtual const std::string& object() const = 0;
  // Textual LLVM IR of the module before and after optimization (for dumps);
  // empty for code loaded from an object.
  virtual const std::string& llvm_ir() const = 0;
};

// Bumped whenever the generated code changes for the same IR and options (a
// new rounding rule, a new reduction order): part of every fingerprint, so an
// on-disk cache never serves code an older lazyjit generated.
// 2: Fma, signed zeros, sums without the no-signed-zeros flag.
// 3: long float sums in float64 blocks with a compensated combine.
// 4: at most PlanOptions::max_kernel_nodes nodes per kernel.
inline constexpr int kCodegenRevision = 4;

class Target {
 public:
  virtual ~Target() = default;
  // Everything that changes generated code: CPU name and features, LLVM version,
  // codegen options. Part of every cache key.
  virtual std::string fingerprint() const = 0;
  // Generates the plan's kernels as an object file and loads it; fills
  // plan.kernel_fns. Throws std::runtime_error naming the kernel on failure.
  virtual std::unique_ptr<CompiledCode> compile(const ir::Graph& g, Plan& plan) = 0;
  // Loads an object file made by compile() for this plan (on a target with the
  // same fingerprint): links it, no codegen. Fills plan.kernel_fns.
  virtual std::unique_ptr<CompiledCode> load(const std::string& object, Plan& plan) = 0;
};

// The host CPU through LLVM's ORC LLJIT. Thread-safe.
std::unique_ptr<Target> make_cpu_target(const CodegenOptions& opts = {});

}  // namespace lazyjit::lowering
