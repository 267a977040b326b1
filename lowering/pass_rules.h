// What the graph passes need to know of where a program's ATen steps run. A
// pass that swaps ops for a library op whose result or speed differs between
// ATen's CPU and CUDA kernels reads it (gemm_epilogue.h: which GELU
// _addmm_activation computes, and whether the CPU's oneDNN GEMM path is kept).
// The runtime's backend (runtime/backend.h) says which rules its programs get.
#pragma once
#include "graph_ir/op_kind.h"

namespace lazyjit::lowering {

struct GemmEpilogueRules {
  bool bias = true;        // mm + bias -> addmm
  bool activation = true;  // relu / gelu -> _addmm_activation
  bool residual = true;    // mm + r -> addmm(r)
  // The GELU _addmm_activation(use_gelu=true) computes where the steps run:
  // Gelu (erf) on the CPU, GeluTanh on CUDA.
  ir::OpKind gelu = ir::OpKind::Gelu;
  bool operator==(const GemmEpilogueRules&) const = default;
};

struct PassRules {
  GemmEpilogueRules gemm_epilogue;
  bool operator==(const PassRules&) const = default;
};

// Library steps on ATen's CPU kernels (the default).
PassRules cpu_library_rules();
// Library steps on ATen's CUDA kernels (cuBLASLt epilogues).
PassRules cuda_library_rules();

}  // namespace lazyjit::lowering
