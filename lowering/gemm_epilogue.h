// GEMM neighbours into the library call: the bias, activation and residual
// that follow an aten::mm / aten::addmm become arguments of one ATen op, so
// that cuBLASLt runs them in its epilogue (CUBLASLT_EPILOGUE_BIAS,
// RELU_BIAS, GELU_BIAS) instead of a second kernel re-reading the product.
//
// Rewrites, each only when the GEMM's result has no other reader (and is no
// graph output) and the neighbour's result has the GEMM's dtype:
//   mm(a, b) + bias          -> addmm(bias, a, b)             bias 1-D [N]
//   addmm(c, a, b, β, α) |> relu -> _addmm_activation(c, a, b, β, α)
//   addmm(...) |> gelu       -> _addmm_activation(..., use_gelu=true), for the
//                               GELU that op computes where the steps run
//   mm(a, b) + r             -> addmm(r, a, b)                r of the result's shape
// and each through the reshape a Linear on a [B, T, C] input records
// (as_strided of the [B*T, N] product into [B, T, N]): the view moves after
// the new op. Chains compose (mm + bias |> relu is one op).
//
// Which GELU: aten::_addmm_activation(use_gelu=true) is the tanh approximation
// on CUDA (cuBLASLt's GELU_BIAS epilogue; ATen's fallback applies
// gelu_(x, "tanh")), but the erf GELU on the CPU (ATen 2.13's CPU kernel calls
// gelu_ with its default approximation; measured: equal to F.gelu, 4.7e-4 off
// the tanh one).
//
// ATen takes cuBLASLt's epilogue when beta == 1, the bias is 1-D, contiguous,
// of mat2's columns, the result contiguous, the dtype float/half/bf16/double
// and every matrix dim > 1; otherwise the same op runs a plain GEMM and then
// relu_/gelu_ in place (still one op, same result). A 2-D self (the residual)
// is cuBLAS's beta = 1 GEMM.
#pragma once
#include "graph_ir/graph.h"
#include "lowering/pass_rules.h"
#include "lowering/passes.h"

namespace lazyjit::lowering {

// The rules (GemmEpilogueRules) are lowering/pass_rules.h's: which rewrites
// pay where the program's ATen steps run (see the CPU measurements in
// bench/gemm_epilogue.py).

ir::Graph fuse_gemm_epilogues(const ir::Graph& g, const GemmEpilogueRules& rules, ValueMap* map = nullptr);

}  // namespace lazyjit::lowering
