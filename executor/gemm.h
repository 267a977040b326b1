// The GEMMs of a compiled program (aten::mm, aten::addmm library steps): the
// decode-sized ones through lazyjit's small GEMM kernel, the
// big ones through oneDNN's inner product (mkldnn::_linear_pointwise, plain layouts, nothing
// packed or cached) instead of ATen's own ops, which run MKL on the x86 wheels.
// Measured on the bench machine (AMD EPYC, AVX-512; bench/results/gemm.md):
// 1.1-1.7x faster from a few million multiply-adds, ~10 us slower on the tiny
// GEMMs of token-by-token decoding, so only big ones go there. Full float32,
// results within an ulp-scale of MKL's (another summation order), as Inductor's
// mkldnn linear is. Op-by-op programs keep ATen's ops: they run as eager does.
//
// bfloat16 inside float32 GEMMs, opt-in with PyTorch's own switch
// (torch.backends.mkldnn.matmul.fp32_precision = "bf16", which
// torch.set_float32_matmul_precision("medium") also sets) on a CPU with native
// bf16 (AVX512-BF16 or AMX): these GEMMs then run on bfloat16 operands with
// float32 sums, ~1.7-2x faster at the bench's shapes, results within bf16
// tolerance of float32 (relative error ~4e-3). Read at each call, as eager reads
// it. With AMX the float32 operands go to oneDNN unconverted (its fpmath mode,
// set by ATen from the same switch, rounds them on the tiles; float32 out), as
// eager's mm does there. Without AMX, eager's ATen mm under the switch stayed
// float32 (AVX512-BF16 EPYC: oneDNN's float32 kernel, errors of ~1e-6).
#pragma once
#include <ATen/core/stack.h>

#include <string>

namespace lazyjit::executor {

enum class Gemm { None, Mm, Addmm, Bmm };

// Which GEMM an ATen op name ("aten::mm", "aten::addmm", "aten::bmm") is; None
// for others.
Gemm gemm_kind(const std::string& op_name);

// With `stack` holding the op's arguments as its schema orders them, for
// float32 2-D operands (addmm: a 1-D bias, beta = alpha = 1): a GEMM of 1 to
// kSmallGemmMaxRows rows against a Linear's weight (mat2 = w^T, w's rows
// contiguous) on an AVX2 or AVX-512 CPU runs lazyjit's own kernel
// (executor/small_gemm.h) instead of MKL's generic-path GEMV; a big one (at
// least 2^23 multiply-adds, mat1 row-major (or column-major on an AVX-512 CPU),
// mat2 row- or column-major, mkldnn enabled) runs oneDNN. Either way the result
// is left as the stack's one value and true returned. False: the stack is untouched and the caller runs ATen's
// op (which raises what eager would), as for a GEMM oneDNN raised on.
//
// bfloat16 (mm, addmm with a 1-D bf16 bias): 1 to kSmallGemmBf16MaxRows rows
// against a Linear's weight run small_gemm_bf16 (bf16 result, float32 sums,
// one rounding, as ATen's), others ATen's op.
//
// bmm of a single batch (float32 or bfloat16 CPU tensors): runs as the mm of
// its two matrices through the above, or ATen's mm, never ATen's bmm (which
// copies a transposed mat2 before handing it to oneDNN); the result is
// [1, M, N], contiguous, as bmm's.
bool run_fast_gemm(Gemm kind, torch::jit::Stack& stack);

// Whether run_fast_gemm may take the small-GEMM kernel: the runtime sets it from
// its Config (LAZYJIT_SMALL_GEMM) when it starts; on until then.
void set_small_gemm_enabled(bool on);

// Whether run_fast_gemm's oneDNN GEMMs compute in bfloat16 now: the user's switch is set
// and the CPU multiplies bf16 natively.
bool bf16_gemms_allowed();

}  // namespace lazyjit::executor
