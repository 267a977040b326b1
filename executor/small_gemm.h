// GEMMs with a few rows against a Linear's weight: y = a w^T (+ bias), a
// [M, K] with M <= kSmallGemmMaxRows, w [N, K] row-major. Token-by-token
// decoding is made of these (M = 1). The x86 wheel's MKL runs them in its
// generic code path on AMD CPUs (mkl_blas_def_xsgemv); this kernel streams
// the weight's rows with AVX-512 FMAs (AVX2 FMAs on CPUs without AVX-512),
// split over ATen's OpenMP pool. For the 29 projections of a token of the
// bench's 4-layer, 256-wide Llama (13.5 MB of weights), on an AVX-512 EPYC:
// 124 us from cache; from DRAM, the case in a real decode step (its other
// work evicts the weights), ~800 us on two threads against ~1400 on one; a
// 32-token generate on the device spends ~45 ms executing programs against
// ~90 with LAZYJIT_SMALL_GEMM=off. On an AVX2-only EPYC the whole generate
// goes from ~240 to ~160 ms with the AVX2 variant. Float32 sums in another
// order than MKL's: results within float32 rounding of eager's. No libtorch
// here.
#pragma once
#include <cstdint>

namespace lazyjit::executor {

inline constexpr int64_t kSmallGemmMaxRows = 4;

// Whether small_gemm runs on this CPU (AVX2 and FMA, or AVX-512F); false:
// callers keep ATen's op.
bool small_gemm_supported();

// The instruction sets the kernel has a variant for; small_gemm takes the
// widest this CPU runs.
// Avx512Bf16: AVX-512 with AVX512-BF16's dot products (bfloat16 only; float32
// runs the Avx512 variant for it).
enum class SmallGemmIsa { Avx2, Avx512, Avx512Bf16 };
bool small_gemm_isa_supported(SmallGemmIsa isa);

// y[m, n] = sum_k a[m * lda + k] * w[n * ldw + k] (+ bias[n] when bias is not
// null), y contiguous [M, N]; 1 <= M <= kSmallGemmMaxRows. Splits N over up to
// `threads` OpenMP threads when the weight is big enough to pay for it.
void small_gemm(const float* a, int64_t lda, const float* w, int64_t ldw, const float* bias, float* y, int64_t M,
                int64_t N, int64_t K, int threads);
// small_gemm with a chosen variant (tests run each one this CPU supports).
void small_gemm_with(SmallGemmIsa isa, const float* a, int64_t lda, const float* w, int64_t ldw, const float* bias,
                     float* y, int64_t M, int64_t N, int64_t K, int threads);

// bfloat16: y = a w^T (+ bias), every operand and y bfloat16 (the raw 16-bit
// patterns), 1 <= M <= kSmallGemmBf16MaxRows. Each weight element is read once
// per call for all M rows (the rows of a are widened to float32 once, up
// front), widened in registers (a bfloat16 is the top half of a float32: a
// shift or a mask), multiplied and summed in float32, and each output rounded
// to bfloat16 once (nearest even, the bias added first), as ATen's bf16 mm
// (oneDNN) computes it; another summation order. N is split over `threads`
// OpenMP threads as small_gemm's. Decoding is made of these GEMVs; they move
// the weight at the memory's read bandwidth instead of oneDNN's ~56% of it.
// Variants: AVX-512 with AVX512-BF16 (vdpbf16ps: the products of bf16 pairs
// summed into float32 lanes by one instruction, subnormal inputs read as zero;
// two streams of weight rows at once), AVX-512 (F and BW: masked 16-bit loads
// for the K tail) and AVX2 with FMA; small_gemm_bf16 takes the first this CPU
// runs. bench/gemv.cpp (build/bench_gemv) measures each against the read
// bandwidth at a 0.5B-class decoder's shapes.
inline constexpr int64_t kSmallGemmBf16MaxRows = 8;
void small_gemm_bf16(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, const uint16_t* bias,
                     uint16_t* y, int64_t M, int64_t N, int64_t K, int threads);
void small_gemm_bf16_with(SmallGemmIsa isa, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw,
                          const uint16_t* bias, uint16_t* y, int64_t M, int64_t N, int64_t K, int threads);
// Whether small_gemm_bf16_with runs `isa` on this CPU (Avx512: F and BW;
// Avx512Bf16: also VL and BF16).
bool small_gemm_bf16_isa_supported(SmallGemmIsa isa);

}  // namespace lazyjit::executor
