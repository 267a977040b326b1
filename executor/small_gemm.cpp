#include "executor/small_gemm.h"

// GCC 12's _mm512_reduce_add_ps starts from _mm512_undefined_ps: a false
// -Wmaybe-uninitialized per call.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>

namespace lazyjit::executor {

namespace {

// Below this many weight elements (64 KiB) one thread is as fast as two. In
// decoding the weights come from DRAM, not cache (the step's other work evicts
// them): one thread streams ~9 GB/s, two ~16 GB/s, so even a [256, 256]
// weight (26 us on one thread) is split.
constexpr int64_t kMinElemsPerThread = int64_t{1} << 14;

// Rows [n0, n1) of y for every m: four weight rows at a time, each read once
// for all M rows of a (kept in L1 across them), 16 lanes per FMA, the K tail
// through a masked load.
__attribute__((target("avx512f"))) void rows_avx512(const float* a, int64_t lda, const float* w, int64_t ldw,
                                                    const float* bias, float* y, int64_t M, int64_t N, int64_t K,
                                                    int64_t n0, int64_t n1) {
  const int64_t kv = K & ~int64_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (K - kv)) - 1u);
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const float* w0 = w + n * ldw;
    const float* w1 = w0 + ldw;
    const float* w2 = w1 + ldw;
    const float* w3 = w2 + ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* x = a + m * lda;
      __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      for (int64_t k = 0; k < kv; k += 16) {
        const __m512 xv = _mm512_loadu_ps(x + k);
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + k), xv, s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(w1 + k), xv, s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(w2 + k), xv, s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(w3 + k), xv, s3);
      }
      if (tail) {
        const __m512 xv = _mm512_maskz_loadu_ps(tail, x + kv);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + kv), xv, s0);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w1 + kv), xv, s1);
        s2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w2 + kv), xv, s2);
        s3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w3 + kv), xv, s3);
      }
      float* out = y + m * N + n;
      out[0] = _mm512_reduce_add_ps(s0) + (bias ? bias[n] : 0.f);
      out[1] = _mm512_reduce_add_ps(s1) + (bias ? bias[n + 1] : 0.f);
      out[2] = _mm512_reduce_add_ps(s2) + (bias ? bias[n + 2] : 0.f);
      out[3] = _mm512_reduce_add_ps(s3) + (bias ? bias[n + 3] : 0.f);
    }
  }
  for (; n < n1; ++n) {
    const float* wr = w + n * ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* x = a + m * lda;
      __m512 s = _mm512_setzero_ps();
      for (int64_t k = 0; k < kv; k += 16) s = _mm512_fmadd_ps(_mm512_loadu_ps(wr + k), _mm512_loadu_ps(x + k), s);
      if (tail) s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, wr + kv), _mm512_maskz_loadu_ps(tail, x + kv), s);
      y[m * N + n] = _mm512_reduce_add_ps(s) + (bias ? bias[n] : 0.f);
    }
  }
}

// The sum of a vector's 8 lanes.
__attribute__((target("avx2,fma"))) inline float reduce_add(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// rows_avx512 for CPUs with AVX2 and FMA but no AVX-512 (8 lanes; the K tail
// through a masked load). The four rows' sums are four independent FMA chains,
// enough while the weight streams from memory.
__attribute__((target("avx2,fma"))) void rows_avx2(const float* a, int64_t lda, const float* w, int64_t ldw,
                                                   const float* bias, float* y, int64_t M, int64_t N, int64_t K,
                                                   int64_t n0, int64_t n1) {
  const int64_t kv = K & ~int64_t{7};
  const int tail_len = static_cast<int>(K - kv);
  alignas(32) int32_t lanes[8];
  for (int i = 0; i < 8; ++i) lanes[i] = i < tail_len ? -1 : 0;
  const __m256i tail = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const float* w0 = w + n * ldw;
    const float* w1 = w0 + ldw;
    const float* w2 = w1 + ldw;
    const float* w3 = w2 + ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* x = a + m * lda;
      __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      for (int64_t k = 0; k < kv; k += 8) {
        const __m256 xv = _mm256_loadu_ps(x + k);
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + k), xv, s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + k), xv, s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + k), xv, s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + k), xv, s3);
      }
      if (tail_len) {
        const __m256 xv = _mm256_maskload_ps(x + kv, tail);
        s0 = _mm256_fmadd_ps(_mm256_maskload_ps(w0 + kv, tail), xv, s0);
        s1 = _mm256_fmadd_ps(_mm256_maskload_ps(w1 + kv, tail), xv, s1);
        s2 = _mm256_fmadd_ps(_mm256_maskload_ps(w2 + kv, tail), xv, s2);
        s3 = _mm256_fmadd_ps(_mm256_maskload_ps(w3 + kv, tail), xv, s3);
      }
      float* out = y + m * N + n;
      out[0] = reduce_add(s0) + (bias ? bias[n] : 0.f);
      out[1] = reduce_add(s1) + (bias ? bias[n + 1] : 0.f);
      out[2] = reduce_add(s2) + (bias ? bias[n + 2] : 0.f);
      out[3] = reduce_add(s3) + (bias ? bias[n + 3] : 0.f);
    }
  }
  for (; n < n1; ++n) {
    const float* wr = w + n * ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* x = a + m * lda;
      __m256 s = _mm256_setzero_ps();
      for (int64_t k = 0; k < kv; k += 8) s = _mm256_fmadd_ps(_mm256_loadu_ps(wr + k), _mm256_loadu_ps(x + k), s);
      if (tail_len) s = _mm256_fmadd_ps(_mm256_maskload_ps(wr + kv, tail), _mm256_maskload_ps(x + kv, tail), s);
      y[m * N + n] = reduce_add(s) + (bias ? bias[n] : 0.f);
    }
  }
}

}  // namespace

bool small_gemm_isa_supported(SmallGemmIsa isa) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return isa == SmallGemmIsa::Avx512 ? avx512 : avx2;
}

bool small_gemm_supported() { return small_gemm_isa_supported(SmallGemmIsa::Avx2); }

void small_gemm(const float* a, int64_t lda, const float* w, int64_t ldw, const float* bias, float* y, int64_t M,
                int64_t N, int64_t K, int threads) {
  static const SmallGemmIsa best =
      small_gemm_isa_supported(SmallGemmIsa::Avx512) ? SmallGemmIsa::Avx512 : SmallGemmIsa::Avx2;
  small_gemm_with(best, a, lda, w, ldw, bias, y, M, N, K, threads);
}

void small_gemm_with(SmallGemmIsa isa, const float* a, int64_t lda, const float* w, int64_t ldw, const float* bias,
                     float* y, int64_t M, int64_t N, int64_t K, int threads) {
  const auto rows = isa == SmallGemmIsa::Avx512 ? rows_avx512 : rows_avx2;
  const int64_t by_size = std::max<int64_t>(1, N * K / kMinElemsPerThread);
  const int tasks = static_cast<int>(std::min<int64_t>({threads, by_size, (N + 3) / 4}));
  if (tasks <= 1 || omp_in_parallel()) {
    rows(a, lda, w, ldw, bias, y, M, N, K, 0, N);
    return;
  }
  // Equal shares in blocks of 4 rows: the weight streams from memory or cache at
  // the same rate on every core.
  const int64_t share = ((N + tasks - 1) / tasks + 3) / 4 * 4;
#pragma omp parallel num_threads(tasks)
  {
    const int64_t n0 = std::min<int64_t>(N, omp_get_thread_num() * share);
    const int64_t n1 = std::min<int64_t>(N, n0 + share);
    if (n0 < n1) rows(a, lda, w, ldw, bias, y, M, N, K, n0, n1);
  }
}

}  // namespace lazyjit::executor
