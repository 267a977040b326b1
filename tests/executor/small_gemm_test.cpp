// lazyjit's small GEMM kernel (executor/small_gemm.h) against a double-
// precision reference: every row count it takes, K with and without a vector
// tail, N not a multiple of its 4-row blocks, strided rows, a bias, one and
// two threads (two threads: the same bits, each output is one thread's dot
// product).
#include "executor/small_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace lazyjit::executor {
namespace {

struct Case {
  int64_t m, n, k, lda, ldw;
  bool bias;
};

std::vector<float> random_floats(size_t n, std::mt19937& g) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

class SmallGemmVariant : public ::testing::TestWithParam<SmallGemmIsa> {};

TEST_P(SmallGemmVariant, MatchesADoublePrecisionReference) {
  const SmallGemmIsa isa = GetParam();
  if (!small_gemm_isa_supported(isa)) GTEST_SKIP() << "this CPU does not run the variant";
  std::mt19937 g(7);
  const Case cases[] = {{1, 688, 256, 256, 256, false}, {1, 256, 688, 688, 688, true}, {4, 37, 100, 100, 100, true},
                        {3, 1000, 256, 300, 256, false}, {2, 9, 5, 5, 5, false},      {1, 3, 16, 16, 20, true},
                        {4, 1, 33, 40, 33, true},        {1, 5000, 64, 64, 64, false}};
  for (const Case& c : cases) {
    std::vector<float> a = random_floats(c.m * c.lda, g), w = random_floats(c.n * c.ldw, g), b = random_floats(c.n, g);
    std::vector<float> y1(c.m * c.n, NAN), y2(c.m * c.n, NAN);
    small_gemm_with(isa, a.data(), c.lda, w.data(), c.ldw, c.bias ? b.data() : nullptr, y1.data(), c.m, c.n, c.k, 1);
    small_gemm_with(isa, a.data(), c.lda, w.data(), c.ldw, c.bias ? b.data() : nullptr, y2.data(), c.m, c.n, c.k, 2);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double want = c.bias ? b[j] : 0.0, scale = std::abs(want);
        for (int64_t kk = 0; kk < c.k; ++kk) {
          want += double(a[i * c.lda + kk]) * double(w[j * c.ldw + kk]);
          scale += std::abs(double(a[i * c.lda + kk]) * double(w[j * c.ldw + kk]));
        }
        const float got = y1[i * c.n + j];
        ASSERT_NEAR(got, want, 1e-6 * scale + 1e-6) << "m " << c.m << " n " << c.n << " k " << c.k << " at [" << i
                                                    << ", " << j << "]";
        ASSERT_EQ(got, y2[i * c.n + j]) << "two threads gave other bits at [" << i << ", " << j << "]";
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, SmallGemmVariant, ::testing::Values(SmallGemmIsa::Avx2, SmallGemmIsa::Avx512),
                         [](const auto& info) { return info.param == SmallGemmIsa::Avx2 ? "Avx2" : "Avx512"; });

// bfloat16: operands rounded to bf16 first, the reference summed in double
// from those values; the kernel sums in float32 and rounds once to bf16, so
// it is within half a bf16 ulp of the exact sum plus float32 summation error.
// Rows 1 to 8, K below one vector, with a tail of each variant's block (32,
// 16), strided rows, N not a multiple of 4, a bias; the two-thread run gives
// the same bits.
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

const char* isa_name(SmallGemmIsa isa) {
  return isa == SmallGemmIsa::Avx2 ? "Avx2" : isa == SmallGemmIsa::Avx512 ? "Avx512" : "Avx512Bf16";
}

class SmallGemmBf16Variant : public ::testing::TestWithParam<SmallGemmIsa> {};

TEST_P(SmallGemmBf16Variant, MatchesADoublePrecisionReference) {
  const SmallGemmIsa isa = GetParam();
  if (!small_gemm_bf16_isa_supported(isa)) GTEST_SKIP() << "this CPU does not run the variant";
  std::mt19937 g(11);
  const Case cases[] = {{1, 688, 256, 256, 256, false}, {1, 256, 688, 688, 688, true}, {8, 37, 100, 100, 100, true},
                        {3, 1000, 256, 300, 256, false}, {2, 9, 5, 5, 5, false},      {1, 3, 16, 16, 20, true},
                        {4, 1, 33, 40, 33, true},        {1, 5000, 64, 64, 64, false}, {5, 61, 47, 50, 49, true},
                        {7, 130, 896, 896, 896, false},  {6, 11, 17, 17, 17, true},   {1, 7, 31, 31, 31, false},
                        {1, 98, 4870, 4870, 4870, true}};
  for (const Case& c : cases) {
    auto bf = [&](size_t n) {
      const std::vector<float> f = random_floats(n, g);
      std::vector<uint16_t> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = to_bf16(f[i]);
      return v;
    };
    std::vector<uint16_t> a = bf(c.m * c.lda), w = bf(c.n * c.ldw), b = bf(c.n);
    std::vector<uint16_t> y1(c.m * c.n, 0xffff), y2(c.m * c.n, 0xffff);
    small_gemm_bf16_with(isa, a.data(), c.lda, w.data(), c.ldw, c.bias ? b.data() : nullptr, y1.data(), c.m, c.n,
                         c.k, 1);
    small_gemm_bf16_with(isa, a.data(), c.lda, w.data(), c.ldw, c.bias ? b.data() : nullptr, y2.data(), c.m, c.n,
                         c.k, 2);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double want = c.bias ? from_bf16(b[j]) : 0.0, scale = std::abs(want);
        for (int64_t kk = 0; kk < c.k; ++kk) {
          const double p = double(from_bf16(a[i * c.lda + kk])) * double(from_bf16(w[j * c.ldw + kk]));
          want += p;
          scale += std::abs(p);
        }
        const float got = from_bf16(y1[i * c.n + j]);
        // Half a bf16 ulp of the result (2^-9 relative) plus float32 sums.
        ASSERT_NEAR(got, want, std::abs(want) / 256 + 1e-6 * scale + 1e-6)
            << "m " << c.m << " n " << c.n << " k " << c.k << " at [" << i << ", " << j << "]";
        ASSERT_EQ(y1[i * c.n + j], y2[i * c.n + j]) << "two threads gave other bits at [" << i << ", " << j << "]";
      }
  }
}

TEST(SmallGemmBf16, RoundsToNearestEvenOnce) {
  // 1 + 2^-8 + 2^-10 rounds to 1 + 2^-7 (bf16 keeps 7 fraction bits); summed
  // in bf16 it would give 1 (1 + 2^-8 is a tie, to even: 1).
  const uint16_t one = to_bf16(1.f), a[3] = {one, one, one};
  const uint16_t w[3] = {one, to_bf16(1.f / 256), to_bf16(1.f / 1024)};
  for (SmallGemmIsa isa : {SmallGemmIsa::Avx2, SmallGemmIsa::Avx512, SmallGemmIsa::Avx512Bf16}) {
    if (!small_gemm_bf16_isa_supported(isa)) continue;
    uint16_t y = 0;
    small_gemm_bf16_with(isa, a, 3, w, 3, nullptr, &y, 1, 1, 3, 1);
    EXPECT_EQ(from_bf16(y), 1.f + 1.f / 128) << isa_name(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, SmallGemmBf16Variant,
                         ::testing::Values(SmallGemmIsa::Avx2, SmallGemmIsa::Avx512, SmallGemmIsa::Avx512Bf16),
                         [](const auto& info) { return isa_name(info.param); });

}  // namespace
}  // namespace lazyjit::executor
