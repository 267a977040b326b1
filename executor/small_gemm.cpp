#include "executor/small_gemm.h"

// GCC 12's _mm512_reduce_add_ps starts from _mm512_undefined_ps: a false
// -Wmaybe-uninitialized per call.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

namespace lazyjit::executor {

namespace {

// Below this many weight elements (64 KiB) one thread is as fast as two. In
// decoding the weights come from DRAM, not cache (the step's other work evicts
// them): one thread streams ~9 GB/s, two ~16 GB/s, so even a [256, 256]
// weight (26 us on one thread) is split.
constexpr int64_t kMinElemsPerThread = int64_t{1} << 14;

// Runs rows(n0, n1) over [0, N) on up to `threads` threads of ATen's OpenMP
// pool (one thread when the weight is small or a parallel region is already
// running). The rows go out in chunks of 4-row blocks that each thread takes
// as it finishes the last, not in fixed halves: on a machine shared with other
// work a thread that is descheduled leaves its rows to the one that runs,
// where a fixed share would make the call wait for it. Each output is still
// one thread's dot product: the bits do not depend on which thread or chunk.
template <class Rows>
void over_threads(int64_t N, int64_t K, int threads, const Rows& rows) {
  const int64_t by_size = std::max<int64_t>(1, N * K / kMinElemsPerThread);
  const int tasks = static_cast<int>(std::min<int64_t>({threads, by_size, (N + 3) / 4}));
  if (tasks <= 1 || omp_in_parallel()) {
    rows(int64_t{0}, N);
    return;
  }
  // About 8 chunks a thread, each at least kMinElemsPerThread / 4 weight elements.
  const int64_t min_rows = std::max<int64_t>(4, (kMinElemsPerThread / 4 + K - 1) / K);
  const int64_t chunk = (std::max(min_rows, N / (8 * tasks)) + 3) / 4 * 4;
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(tasks)
  {
    for (int64_t n0; (n0 = next.fetch_add(chunk, std::memory_order_relaxed)) < N;)
      rows(n0, std::min(N, n0 + chunk));
  }
}

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

// ---- bfloat16 ----

inline float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even, NaN to the canonical quiet NaN: c10::BFloat16's rounding.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The rows of a, widened to float32 and laid out for the kernels: in each
// block of B elements (one vector load of B bfloat16s) the even-indexed ones
// first, then the odd-indexed ones, zero-padded to a whole block. Loaded as
// 32-bit lanes, a block of bfloat16 pairs gives the even elements as floats by
// a left shift of 16 and the odd ones by masking the low half off: the weight
// is widened with one instruction per B/2 elements, never shuffled.
int64_t padded_k(int64_t K, int64_t B) { return (K + B - 1) / B * B; }

void split_rows(const uint16_t* a, int64_t lda, int64_t M, int64_t K, int64_t B, float* xs) {
  const int64_t kp = padded_k(K, B);
  std::fill(xs, xs + M * kp, 0.f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t r = k % B;
      xs[m * kp + k - r + (r & 1) * (B / 2) + r / 2] = bf16_to_float(a[m * lda + k]);
    }
}

#define LAZYJIT_AVX512_BF16_TARGET __attribute__((target("avx512f,avx512bw")))

LAZYJIT_AVX512_BF16_TARGET inline __m512 widen_even(__m512i v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
LAZYJIT_AVX512_BF16_TARGET inline __m512 widen_odd(__m512i v) {
  return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// y[m, n] = the sum of s's lanes (+ bias[n]), rounded to bfloat16.
LAZYJIT_AVX512_BF16_TARGET inline void store_bf16(uint16_t* y, int64_t m, int64_t N, int64_t n, const uint16_t* bias,
                                                  __m512 s) {
  y[m * N + n] = float_to_bf16(_mm512_reduce_add_ps(s) + (bias ? bf16_to_float(bias[n]) : 0.f));
}

// Rows [n0, n1) of y for every m, four weight rows at a time (32 bfloat16s of
// each per step, two float32 sums per row), the K tail through a masked load.
LAZYJIT_AVX512_BF16_TARGET void rows_bf16_avx512(const float* xs, int64_t kp, const uint16_t* w, int64_t ldw,
                                                  const uint16_t* bias, uint16_t* y, int64_t M, int64_t N,
                                                  int64_t K, int64_t n0, int64_t n1) {
  const int64_t kv = K & ~int64_t{31};
  const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (K - kv)) - 1u);
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const uint16_t* w0 = w + n * ldw;
    const uint16_t* w1 = w0 + ldw;
    const uint16_t* w2 = w1 + ldw;
    const uint16_t* w3 = w2 + ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* x = xs + m * kp;
      __m512 e0 = _mm512_setzero_ps(), e1 = e0, e2 = e0, e3 = e0, o0 = e0, o1 = e0, o2 = e0, o3 = e0;
      for (int64_t k = 0; k < kv; k += 32) {
        const __m512 xe = _mm512_loadu_ps(x + k), xo = _mm512_loadu_ps(x + k + 16);
        const __m512i v0 = _mm512_loadu_si512(w0 + k), v1 = _mm512_loadu_si512(w1 + k);
        const __m512i v2 = _mm512_loadu_si512(w2 + k), v3 = _mm512_loadu_si512(w3 + k);
        e0 = _mm512_fmadd_ps(widen_even(v0), xe, e0);
        o0 = _mm512_fmadd_ps(widen_odd(v0), xo, o0);
        e1 = _mm512_fmadd_ps(widen_even(v1), xe, e1);
        o1 = _mm512_fmadd_ps(widen_odd(v1), xo, o1);
        e2 = _mm512_fmadd_ps(widen_even(v2), xe, e2);
        o2 = _mm512_fmadd_ps(widen_odd(v2), xo, o2);
        e3 = _mm512_fmadd_ps(widen_even(v3), xe, e3);
        o3 = _mm512_fmadd_ps(widen_odd(v3), xo, o3);
      }
      if (tail) {
        const __m512 xe = _mm512_loadu_ps(x + kv), xo = _mm512_loadu_ps(x + kv + 16);
        const __m512i v0 = _mm512_maskz_loadu_epi16(tail, w0 + kv), v1 = _mm512_maskz_loadu_epi16(tail, w1 + kv);
        const __m512i v2 = _mm512_maskz_loadu_epi16(tail, w2 + kv), v3 = _mm512_maskz_loadu_epi16(tail, w3 + kv);
        e0 = _mm512_fmadd_ps(widen_even(v0), xe, e0);
        o0 = _mm512_fmadd_ps(widen_odd(v0), xo, o0);
        e1 = _mm512_fmadd_ps(widen_even(v1), xe, e1);
        o1 = _mm512_fmadd_ps(widen_odd(v1), xo, o1);
        e2 = _mm512_fmadd_ps(widen_even(v2), xe, e2);
        o2 = _mm512_fmadd_ps(widen_odd(v2), xo, o2);
        e3 = _mm512_fmadd_ps(widen_even(v3), xe, e3);
        o3 = _mm512_fmadd_ps(widen_odd(v3), xo, o3);
      }
      store_bf16(y, m, N, n, bias, _mm512_add_ps(e0, o0));
      store_bf16(y, m, N, n + 1, bias, _mm512_add_ps(e1, o1));
      store_bf16(y, m, N, n + 2, bias, _mm512_add_ps(e2, o2));
      store_bf16(y, m, N, n + 3, bias, _mm512_add_ps(e3, o3));
    }
  }
  for (; n < n1; ++n) {
    const uint16_t* wr = w + n * ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* x = xs + m * kp;
      __m512 e = _mm512_setzero_ps(), o = e;
      for (int64_t k = 0; k < kv; k += 32) {
        const __m512i v = _mm512_loadu_si512(wr + k);
        e = _mm512_fmadd_ps(widen_even(v), _mm512_loadu_ps(x + k), e);
        o = _mm512_fmadd_ps(widen_odd(v), _mm512_loadu_ps(x + k + 16), o);
      }
      if (tail) {
        const __m512i v = _mm512_maskz_loadu_epi16(tail, wr + kv);
        e = _mm512_fmadd_ps(widen_even(v), _mm512_loadu_ps(x + kv), e);
        o = _mm512_fmadd_ps(widen_odd(v), _mm512_loadu_ps(x + kv + 16), o);
      }
      store_bf16(y, m, N, n, bias, _mm512_add_ps(e, o));
    }
  }
}

#define LAZYJIT_AVX512_DPBF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// The four sums of a, b, c, d's lanes, in this order, as one vector.
LAZYJIT_AVX512_BF16_TARGET inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // Within each 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], the same for c, d.
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  // [a, b, c, d] partial sums in each 128-bit lane, then the four lanes added.
  const __m512 v = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// y[m, n..n+3] = s's four sums (+ bias), rounded to bfloat16.
inline void store4_bf16(uint16_t* y, int64_t m, int64_t N, int64_t n, const uint16_t* bias, __m128 s) {
  alignas(16) float f[4];
  _mm_store_ps(f, s);
  for (int i = 0; i < 4; ++i) y[m * N + n + i] = float_to_bf16(f[i] + (bias ? bf16_to_float(bias[n + i]) : 0.f));
}

// s + the products of w's and x's 32 bfloat16s, summed pairwise into s's lanes.
LAZYJIT_AVX512_DPBF16_TARGET inline __m512 dot(__m512 s, __m512i wv, const uint16_t* x) {
  return _mm512_dpbf16_ps(s, (__m512bh)wv, (__m512bh)_mm512_loadu_si512(x));
}

// Four weight rows from w on (row stride ldw) against every row of xs: their
// sums into y[m, n..n+3], and with `second` another four rows' (from second
// on, into y[m, n2..n2+3]) in the same pass over K.
template <bool kTwo>
LAZYJIT_AVX512_DPBF16_TARGET inline void blocks_dp(const uint16_t* xs, int64_t kp, const uint16_t* w,
                                                   const uint16_t* second, int64_t ldw, const uint16_t* bias,
                                                   uint16_t* y, int64_t M, int64_t N, int64_t K, int64_t n,
                                                   int64_t n2) {
  const int64_t kv = K & ~int64_t{31};
  const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (K - kv)) - 1u);
  const uint16_t *w0 = w, *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
  const uint16_t *v0 = second, *v1 = v0 + ldw, *v2 = v1 + ldw, *v3 = v2 + ldw;
  for (int64_t m = 0; m < M; ++m) {
    const uint16_t* x = xs + m * kp;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;
    for (int64_t k = 0; k < kv; k += 32) {
      s0 = dot(s0, _mm512_loadu_si512(w0 + k), x + k);
      s1 = dot(s1, _mm512_loadu_si512(w1 + k), x + k);
      s2 = dot(s2, _mm512_loadu_si512(w2 + k), x + k);
      s3 = dot(s3, _mm512_loadu_si512(w3 + k), x + k);
      if constexpr (kTwo) {
        t0 = dot(t0, _mm512_loadu_si512(v0 + k), x + k);
        t1 = dot(t1, _mm512_loadu_si512(v1 + k), x + k);
        t2 = dot(t2, _mm512_loadu_si512(v2 + k), x + k);
        t3 = dot(t3, _mm512_loadu_si512(v3 + k), x + k);
      }
    }
    if (tail) {
      s0 = dot(s0, _mm512_maskz_loadu_epi16(tail, w0 + kv), x + kv);
      s1 = dot(s1, _mm512_maskz_loadu_epi16(tail, w1 + kv), x + kv);
      s2 = dot(s2, _mm512_maskz_loadu_epi16(tail, w2 + kv), x + kv);
      s3 = dot(s3, _mm512_maskz_loadu_epi16(tail, w3 + kv), x + kv);
      if constexpr (kTwo) {
        t0 = dot(t0, _mm512_maskz_loadu_epi16(tail, v0 + kv), x + kv);
        t1 = dot(t1, _mm512_maskz_loadu_epi16(tail, v1 + kv), x + kv);
        t2 = dot(t2, _mm512_maskz_loadu_epi16(tail, v2 + kv), x + kv);
        t3 = dot(t3, _mm512_maskz_loadu_epi16(tail, v3 + kv), x + kv);
      }
    }
    store4_bf16(y, m, N, n, bias, reduce4(s0, s1, s2, s3));
    if constexpr (kTwo) store4_bf16(y, m, N, n2, bias, reduce4(t0, t1, t2, t3));
  }
}

// rows_bf16_avx512 with the CPU's bfloat16 dot products (AVX512-BF16's
// vdpbf16ps: 32 products of bf16 pairs summed into 16 float32 lanes by one
// instruction, where widening takes two shifts and two FMAs): xs holds the
// rows of a as bfloat16, zero-padded to kp (a multiple of 32). The rows
// [n0, n1) are read as two streams at once, the first half's 4-row blocks
// beside the second half's: one core reads DRAM faster from two distant
// streams than from one (a sum over 1 GiB on this machine's EPYC: ~38 GB/s of
// CPU time against ~29). The instruction treats subnormal inputs as zero and
// rounds its float32 sums to nearest even.
LAZYJIT_AVX512_DPBF16_TARGET void rows_bf16_dp(const uint16_t* xs, int64_t kp, const uint16_t* w, int64_t ldw,
                                            const uint16_t* bias, uint16_t* y, int64_t M, int64_t N, int64_t K,
                                            int64_t n0, int64_t n1) {
  const int64_t blocks = (n1 - n0) / 4, half = blocks / 2;
  for (int64_t b = 0; b < half; ++b) {
    const int64_t n = n0 + 4 * b, n2 = n + 4 * half;
    blocks_dp<true>(xs, kp, w + n * ldw, w + n2 * ldw, ldw, bias, y, M, N, K, n, n2);
  }
  int64_t n = n0 + 8 * half;
  if (n + 4 <= n1) {
    blocks_dp<false>(xs, kp, w + n * ldw, nullptr, ldw, bias, y, M, N, K, n, 0);
    n += 4;
  }
  const int64_t kv = K & ~int64_t{31};
  const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (K - kv)) - 1u);
  for (; n < n1; ++n) {
    const uint16_t* wr = w + n * ldw;
    for (int64_t m = 0; m < M; ++m) {
      const uint16_t* x = xs + m * kp;
      __m512 s = _mm512_setzero_ps();
      for (int64_t k = 0; k < kv; k += 32) s = dot(s, _mm512_loadu_si512(wr + k), x + k);
      if (tail) s = dot(s, _mm512_maskz_loadu_epi16(tail, wr + kv), x + kv);
      store_bf16(y, m, N, n, bias, s);
    }
  }
}

#define LAZYJIT_AVX2_TARGET __attribute__((target("avx2,fma")))

LAZYJIT_AVX2_TARGET inline __m256 widen_even(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
LAZYJIT_AVX2_TARGET inline __m256 widen_odd(__m256i v) {
  return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

// 16 bfloat16s of a weight row from k on; past K (the tail) zeros, read
// through a copy (AVX2 has no 16-bit masked load).
LAZYJIT_AVX2_TARGET inline __m256i load16(const uint16_t* p, int64_t k, int64_t K) {
  if (k + 16 <= K) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + k));
  alignas(32) uint16_t t[16] = {};
  std::memcpy(t, p + k, static_cast<size_t>(K - k) * sizeof(uint16_t));
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(t));
}

LAZYJIT_AVX2_TARGET inline void store_bf16(uint16_t* y, int64_t m, int64_t N, int64_t n, const uint16_t* bias,
                                           __m256 s) {
  y[m * N + n] = float_to_bf16(reduce_add(s) + (bias ? bf16_to_float(bias[n]) : 0.f));
}

// rows_bf16_avx512 with 8-lane vectors (16 bfloat16s of each row per step).
LAZYJIT_AVX2_TARGET void rows_bf16_avx2(const float* xs, int64_t kp, const uint16_t* w, int64_t ldw,
                                        const uint16_t* bias, uint16_t* y, int64_t M, int64_t N, int64_t K,
                                        int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const uint16_t* w0 = w + n * ldw;
    const uint16_t* w1 = w0 + ldw;
    const uint16_t* w2 = w1 + ldw;
    const uint16_t* w3 = w2 + ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* x = xs + m * kp;
      __m256 e0 = _mm256_setzero_ps(), e1 = e0, e2 = e0, e3 = e0, o0 = e0, o1 = e0, o2 = e0, o3 = e0;
      for (int64_t k = 0; k < K; k += 16) {
        const __m256 xe = _mm256_loadu_ps(x + k), xo = _mm256_loadu_ps(x + k + 8);
        const __m256i v0 = load16(w0, k, K), v1 = load16(w1, k, K), v2 = load16(w2, k, K), v3 = load16(w3, k, K);
        e0 = _mm256_fmadd_ps(widen_even(v0), xe, e0);
        o0 = _mm256_fmadd_ps(widen_odd(v0), xo, o0);
        e1 = _mm256_fmadd_ps(widen_even(v1), xe, e1);
        o1 = _mm256_fmadd_ps(widen_odd(v1), xo, o1);
        e2 = _mm256_fmadd_ps(widen_even(v2), xe, e2);
        o2 = _mm256_fmadd_ps(widen_odd(v2), xo, o2);
        e3 = _mm256_fmadd_ps(widen_even(v3), xe, e3);
        o3 = _mm256_fmadd_ps(widen_odd(v3), xo, o3);
      }
      store_bf16(y, m, N, n, bias, _mm256_add_ps(e0, o0));
      store_bf16(y, m, N, n + 1, bias, _mm256_add_ps(e1, o1));
      store_bf16(y, m, N, n + 2, bias, _mm256_add_ps(e2, o2));
      store_bf16(y, m, N, n + 3, bias, _mm256_add_ps(e3, o3));
    }
  }
  for (; n < n1; ++n) {
    const uint16_t* wr = w + n * ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* x = xs + m * kp;
      __m256 e = _mm256_setzero_ps(), o = e;
      for (int64_t k = 0; k < K; k += 16) {
        const __m256i v = load16(wr, k, K);
        e = _mm256_fmadd_ps(widen_even(v), _mm256_loadu_ps(x + k), e);
        o = _mm256_fmadd_ps(widen_odd(v), _mm256_loadu_ps(x + k + 8), o);
      }
      store_bf16(y, m, N, n, bias, _mm256_add_ps(e, o));
    }
  }
}

}  // namespace

bool small_gemm_isa_supported(SmallGemmIsa isa) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  // float32 has no bf16 instructions: Avx512Bf16 runs the AVX-512 variant.
  return isa == SmallGemmIsa::Avx2 ? avx2 : avx512;
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
  const auto rows = isa == SmallGemmIsa::Avx2 ? rows_avx2 : rows_avx512;
  over_threads(N, K, threads, [&](int64_t n0, int64_t n1) { rows(a, lda, w, ldw, bias, y, M, N, K, n0, n1); });
}

bool small_gemm_bf16_isa_supported(SmallGemmIsa isa) {
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  static const bool avx512bf16 =
      avx512 && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  switch (isa) {
    case SmallGemmIsa::Avx512Bf16: return avx512bf16;
    case SmallGemmIsa::Avx512: return avx512;
    case SmallGemmIsa::Avx2: break;
  }
  return small_gemm_isa_supported(SmallGemmIsa::Avx2);
}

void small_gemm_bf16(const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw, const uint16_t* bias,
                     uint16_t* y, int64_t M, int64_t N, int64_t K, int threads) {
  static const SmallGemmIsa best = small_gemm_bf16_isa_supported(SmallGemmIsa::Avx512Bf16) ? SmallGemmIsa::Avx512Bf16
                                   : small_gemm_bf16_isa_supported(SmallGemmIsa::Avx512)   ? SmallGemmIsa::Avx512
                                                                                           : SmallGemmIsa::Avx2;
  small_gemm_bf16_with(best, a, lda, w, ldw, bias, y, M, N, K, threads);
}

void small_gemm_bf16_with(SmallGemmIsa isa, const uint16_t* a, int64_t lda, const uint16_t* w, int64_t ldw,
                          const uint16_t* bias, uint16_t* y, int64_t M, int64_t N, int64_t K, int threads) {
  if (isa == SmallGemmIsa::Avx512Bf16) {
    // The rows of a as they are (bfloat16 pairs, what vdpbf16ps takes),
    // zero-padded to whole 32-element blocks.
    const int64_t kp = padded_k(K, 32);
    std::vector<uint16_t> xs(static_cast<size_t>(M * kp), 0);
    for (int64_t m = 0; m < M; ++m) std::memcpy(&xs[m * kp], a + m * lda, static_cast<size_t>(K) * sizeof(uint16_t));
    over_threads(N, K, threads,
                 [&](int64_t n0, int64_t n1) { rows_bf16_dp(xs.data(), kp, w, ldw, bias, y, M, N, K, n0, n1); });
    return;
  }
  const bool avx512 = isa == SmallGemmIsa::Avx512;
  const auto rows = avx512 ? rows_bf16_avx512 : rows_bf16_avx2;
  const int64_t block = avx512 ? 32 : 16;
  const int64_t kp = padded_k(K, block);
  std::vector<float> xs(static_cast<size_t>(M * kp));
  split_rows(a, lda, M, K, block, xs.data());
  over_threads(N, K, threads,
               [&](int64_t n0, int64_t n1) { rows(xs.data(), kp, w, ldw, bias, y, M, N, K, n0, n1); });
}

}  // namespace lazyjit::executor
