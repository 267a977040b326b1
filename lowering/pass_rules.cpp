#include "lowering/pass_rules.h"

#include <cstdlib>
#include <string>

#include "env/env.h"

namespace lazyjit::lowering {

PassRules cpu_library_rules() {
  PassRules r;
  // _addmm_activation and an addmm with a 2-D self leave the oneDNN path the
  // executor gives mm and 1-D-bias addmm (executor/gemm.h) for ATen's MKL op,
  // measured slower than oneDNN's GEMM and a fused kernel
  // (bench/gemm_epilogue.py); mm + bias -> addmm keeps it.
  r.gemm_epilogue.activation = r.gemm_epilogue.residual = false;
  // Tests and the bench only: every rewrite on the CPU too. Not part of the
  // cache key (like the other LAZYJIT_TEST_ hooks): use it with LAZYJIT_CACHE=off.
  if (env::get("LAZYJIT_TEST_GEMM_EPILOGUE") == "all")
    r.gemm_epilogue.activation = r.gemm_epilogue.residual = true;
  return r;
}

PassRules cuda_library_rules() {
  PassRules r;
  r.gemm_epilogue.gelu = ir::OpKind::GeluTanh;  // cuBLASLt's GELU_BIAS epilogue
  return r;
}

}  // namespace lazyjit::lowering
