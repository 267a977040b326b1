// The CPU target: each kernel through LLVM for the host (codegen.h) into its own
// object, linked by ORC (jit.h); the per-kernel loop is targets/kernel_target.h's.
#pragma once
#include <memory>

#include "lowering/target.h"

namespace lazyjit::lowering {

// The host CPU through LLVM's ORC LLJIT. Thread-safe.
std::unique_ptr<Target> make_cpu_target(const CodegenOptions& opts = {});

}  // namespace lazyjit::lowering
