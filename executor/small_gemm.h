// GEMMs with a few rows against a Linear's weight: y = a w^T (+ bias), a
// [M, K] with M <= kSmallGemmMaxRows, w [N, K] row-major. Token-by-token
// decoding is made of these (M = 1). The x86 wheel's MKL runs them in its
// generic code path on AMD CPUs (mkl_blas_def_xsgemv: ~34 us per projection
// of a 4-layer, 256-wide Llama, 14 GB/s from cache); this kernel streams the
// weight's rows with AVX-512 FMAs on ATen's OpenMP pool (~4.5 us, near the
// cache's bandwidth; bench/gemv.py). Float32 sums in another order than MKL's:
// results within float32 rounding of eager's. No libtorch here.
#pragma once
#include <cstdint>

namespace lazyjit::executor {

inline constexpr int64_t kSmallGemmMaxRows = 4;

// Whether small_gemm runs on this CPU (AVX-512F); false: callers keep ATen's op.
bool small_gemm_supported();

// y[m, n] = sum_k a[m * lda + k] * w[n * ldw + k] (+ bias[n] when bias is not
// null), y contiguous [M, N]; 1 <= M <= kSmallGemmMaxRows. Splits N over up to
// `threads` OpenMP threads when the weight is big enough to pay for it.
void small_gemm(const float* a, int64_t lda, const float* w, int64_t ldw, const float* bias, float* y, int64_t M,
                int64_t N, int64_t K, int threads);

}  // namespace lazyjit::executor
