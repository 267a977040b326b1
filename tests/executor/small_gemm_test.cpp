// lazyjit's small GEMM kernel (executor/small_gemm.h) against a double-
// precision reference: every row count it takes, K with and without a vector
// tail, N not a multiple of its 4-row blocks, strided rows, a bias, one and
// two threads (two threads: the same bits, each output is one thread's dot
// product).
#include "executor/small_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
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

}  // namespace
}  // namespace lazyjit::executor
