// The read bandwidth and lazyjit's GEMV kernel (executor/small_gemm.h) at a
// 0.5B-class decoder's shapes (Qwen2-0.5B: hidden 896, intermediate 4864, 2 KV
// heads of 64, a 65,536 lm_head), batch 1, bf16 and f32 weights, 1 and 2 threads.
//
//   build/bench_gemv [--threads 1,2] [--reps 7] [--layers 8] [--json]
//
// read      the bandwidth a decode step's limit is stated in: a sum over 1 GiB
//           of float32, ATen's (at::sum) and a plain streaming one (AVX-512 or
//           AVX2 adds into 8 accumulators, the range split over the threads).
// shape     one weight shape, enough copies of it to fill 256 MiB cycled through
//           (each call reads its weight from DRAM, as a decode step does, whose
//           other work evicts the weights), GB/s of weight bytes: lazyjit's
//           kernel (its best variant on this CPU, and the AVX2 variant) and
//           ATen's mm (x @ w.t(), what eager runs).
// token     the GEMVs of one decode token in their order: --layers layers of
//           q, k, v, o, gate, up, down, then lm_head, every weight distinct.
//
// Each figure from --reps passes (a pass reads 256 MiB or more): GB/s at the
// median pass and at the fastest, and by CPU time; the percentages are of the
// AVX sum's bandwidth taken the same way at the same thread count.
// GCC 12's _mm512_reduce_add_ps starts from _mm512_undefined_ps: a false
// -Wmaybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "executor/small_gemm.h"

namespace ex = lazyjit::executor;

namespace {

double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Timing {
  double wall_s, cpu_s;  // medians
  double best_wall_s;    // the fastest pass
};

Timing time_it(int reps, const std::function<void()>& f) {
  f();  // warm: page faults, code
  std::vector<double> wall, cpu;
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_now();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cpu_now() - c0);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2], wall[0]};
}

// The sum of p[0, n): its two halves read at once, 32 lanes of each per step
// (one core reads DRAM faster from two distant streams than from one: ~38
// against ~29 GB/s of CPU time on an AVX-512 EPYC); AVX-512 or AVX2 adds.
__attribute__((target_clones("avx512f", "avx2", "default"))) float sum_two_streams(const float* p, int64_t n) {
  float s[2][32] = {};
  const int64_t half = n / 2 / 32 * 32;
  const float* q = p + half;
  for (int64_t i = 0; i < half; i += 32) {
#pragma omp simd
    for (int j = 0; j < 32; ++j) {
      s[0][j] += p[i + j];
      s[1][j] += q[i + j];
    }
  }
  float r = 0;
  for (int64_t i = 2 * half; i < n; ++i) r += p[i];
  for (int j = 0; j < 32; ++j) r += s[0][j] + s[1][j];
  return r;
}

float sum_split(const float* p, int64_t n, int threads) {
  std::vector<float> part(threads);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    const int64_t share = (n / threads + 15) / 16 * 16;
    const int64_t b = std::min(n, t * share), e = std::min(n, b + share);
    part[t] = sum_two_streams(p + b, e - b);
  }
  float r = 0;
  for (float x : part) r += x;
  return r;
}

struct Shape {
  std::string name;
  int64_t n, k;
};

// Copies of a weight filling at least `bytes`, cycled so that each call's comes from DRAM.
struct Weights {
  std::vector<at::Tensor> w;
  size_t next = 0;
  Weights(int64_t n, int64_t k, at::ScalarType dt, int64_t bytes) {
    const int64_t one = n * k * at::elementSize(dt);
    const int64_t copies = std::max<int64_t>(2, (bytes + one - 1) / one);
    for (int64_t i = 0; i < copies; ++i) w.push_back(at::randn({n, k}).mul_(0.05).to(dt));
  }
  int64_t bytes() const { return static_cast<int64_t>(w.size()) * w[0].nbytes(); }
};

int64_t gemv(const char* impl, const at::Tensor& x, const at::Tensor& w, at::Tensor& y, int threads) {
  const int64_t n = w.size(0), k = w.size(1);
  if (std::strcmp(impl, "aten") == 0) {
    at::mm_out(y, x, w.t());
  } else {
    const ex::SmallGemmIsa isa = std::strcmp(impl, "avx2") == 0     ? ex::SmallGemmIsa::Avx2
                                 : std::strcmp(impl, "avx512") == 0 ? ex::SmallGemmIsa::Avx512
                                                                    : ex::SmallGemmIsa::Avx512Bf16;
    if (w.scalar_type() == at::kBFloat16) {
      auto bits = [](const at::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.const_data_ptr()); };
      ex::small_gemm_bf16_with(isa, bits(x), k, bits(w), k, nullptr, reinterpret_cast<uint16_t*>(y.mutable_data_ptr()),
                               1, n, k, threads);
    } else {
      ex::small_gemm_with(isa, x.const_data_ptr<float>(), k, w.const_data_ptr<float>(), k, nullptr,
                          y.mutable_data_ptr<float>(), 1, n, k, threads);
    }
  }
  return w.nbytes();
}

// One line (and a JSON line with --json): GB/s at the median and at the
// fastest pass, and by CPU time (bytes x threads / the process's CPU seconds:
// the rate while its threads ran, what a machine shared with other work
// disturbs least), each also as a fraction of the read bandwidth measured the
// same way.
struct Line {
  double med, best, cpu;
};

Line rates(int64_t bytes, const Timing& t, int threads) {
  return {bytes / t.wall_s / 1e9, bytes / t.best_wall_s / 1e9, bytes * double(threads) / t.cpu_s / 1e9};
}

void report(bool json, int threads, const std::string& what, const std::string& dtype, const std::string& name,
            const char* impl, double us, const Line& r, const Line& read) {
  std::printf("  %-4s %-26s %-6s %10.1f us  GB/s median %5.1f (%3.0f%%)  best %5.1f (%3.0f%%)  by CPU %5.1f (%3.0f%%)\n",
              dtype.c_str(), name.c_str(), impl, us, r.med, 100 * r.med / read.med, r.best, 100 * r.best / read.best,
              r.cpu, 100 * r.cpu / read.cpu);
  if (json)
    std::printf("JSON {\"threads\": %d, \"what\": \"%s\", \"dtype\": \"%s\", \"shape\": \"%s\", \"impl\": \"%s\", "
                "\"us\": %.3f, \"gbs_median\": %.3f, \"gbs_best\": %.3f, \"gbs_cpu\": %.3f, \"of_read_median\": %.4f, "
                "\"of_read_best\": %.4f, \"of_read_cpu\": %.4f}\n",
                threads, what.c_str(), dtype.c_str(), name.c_str(), impl, us, r.med, r.best, r.cpu, r.med / read.med,
                r.best / read.best, r.cpu / read.cpu);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads{1, 2};
  int reps = 7, layers = 8;
  bool json = false;
  std::string dtypes = "bf16,f32";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads.clear();
      for (const char* p = argv[++i]; *p;) {
        threads.push_back(std::max(1, std::atoi(p)));
        while (*p && *p != ',') ++p;
        if (*p) ++p;
      }
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--layers" && i + 1 < argc) {
      layers = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--dtypes" && i + 1 < argc) {
      dtypes = argv[++i];
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: %s [--threads 1,2] [--reps N] [--layers N] [--dtypes bf16,f32] [--json]\n",
                   argv[0]);
      return 2;
    }
  }
  at::manual_seed(0);
  // Each variant this CPU runs ("dpbf16": AVX-512 with AVX512-BF16, the same
  // code as "avx512" in float32), then ATen's mm.
  std::vector<const char*> impls;
  if (ex::small_gemm_bf16_isa_supported(ex::SmallGemmIsa::Avx512Bf16)) impls.push_back("dpbf16");
  if (ex::small_gemm_bf16_isa_supported(ex::SmallGemmIsa::Avx512)) impls.push_back("avx512");
  impls.push_back("avx2");
  impls.push_back("aten");
  const std::vector<Shape> shapes{{"q/o 896x896", 896, 896},     {"k/v 128x896", 128, 896},
                                  {"gate/up 4864x896", 4864, 896}, {"down 896x4864", 896, 4864},
                                  {"lm_head 65536x896", 65536, 896}};
  const at::Tensor big = at::ones({int64_t{1} << 28});  // 1 GiB of float32
  const int64_t pass_bytes = int64_t{256} << 20;
  for (const int t : threads) {
    at::set_num_threads(t);
    const Timing aten_sum = time_it(reps, [&] { (void)at::sum(big).item<float>(); });
    const Timing avx_sum = time_it(reps, [&] { (void)sum_split(big.const_data_ptr<float>(), big.numel(), t); });
    const Line read = rates(big.nbytes(), avx_sum, t);
    std::printf("threads %d (load %.2f)\n", t, [] {
      double l[1];
      return getloadavg(l, 1) == 1 ? l[0] : -1.0;
    }());
    report(json, t, "read", "f32", "sum over 1 GiB", "avx", avx_sum.wall_s * 1e6, read, read);
    report(json, t, "read", "f32", "sum over 1 GiB", "aten", aten_sum.wall_s * 1e6, rates(big.nbytes(), aten_sum, t),
           read);
    for (const at::ScalarType dt : {at::kBFloat16, at::kFloat}) {
      const std::string dname = dt == at::kBFloat16 ? "bf16" : "f32";
      if (dtypes.find(dname) == std::string::npos) continue;
      for (const Shape& s : shapes) {
        Weights ws(s.n, s.k, dt, pass_bytes);
        const at::Tensor x = at::randn({1, s.k}).to(dt);
        at::Tensor y = at::empty({1, s.n}, x.options());
        for (const char* impl : impls) {
          if (dt == at::kFloat && std::strcmp(impl, "dpbf16") == 0) continue;
          const Timing tm = time_it(reps, [&] {
            for (const at::Tensor& w : ws.w) gemv(impl, x, w, y, t);
          });
          report(json, t, "shape", dname, s.name, impl, tm.wall_s / ws.w.size() * 1e6, rates(ws.bytes(), tm, t),
                 read);
        }
      }
      // One decode token's GEMVs, every weight distinct.
      std::vector<at::Tensor> token, xs, ys;
      for (int l = 0; l < layers; ++l)
        for (const Shape& s : {shapes[0], shapes[1], shapes[1], shapes[0], shapes[2], shapes[2], shapes[3]})
          token.push_back(at::randn({s.n, s.k}).mul_(0.05).to(dt));
      token.push_back(at::randn({shapes[4].n, shapes[4].k}).mul_(0.05).to(dt));
      int64_t token_bytes = 0;
      for (const at::Tensor& w : token) {
        token_bytes += w.nbytes();
        xs.push_back(at::randn({1, w.size(1)}).to(dt));
        ys.push_back(at::empty({1, w.size(0)}, xs.back().options()));
      }
      const std::string name = "token " + std::to_string(layers) + " layers " +
                               std::to_string(token_bytes / 1000000) + " MB";
      for (const char* impl : impls) {
        if (dt == at::kFloat && std::strcmp(impl, "dpbf16") == 0) continue;
        const Timing tm = time_it(reps, [&] {
          for (size_t i = 0; i < token.size(); ++i) gemv(impl, xs[i], token[i], ys[i], t);
        });
        report(json, t, "token", dname, name, impl, tm.wall_s * 1e6, rates(token_bytes, tm, t), read);
      }
    }
  }
  return 0;
}
