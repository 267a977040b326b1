// Tracing cost per op from C++: N elementwise ops recorded on lazyjit tensors
// (no sync), against the same ops dispatched to the Meta device (PyTorch's
// dispatcher plus a shape-only kernel, no data). The difference is what lazyjit
// adds per op. Prints one JSON line.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "tracer/lazyjit.h"

template <class F>
double per_op_ns(int n, F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 20000;
  auto run = [&](torch::Tensor x) {
    for (int i = 0; i < n / 2; ++i) {
      x = x * 1.0001;
      x = x + 0.5;
    }
    return x;
  };
  auto lazy = torch::randn({64}).to(lazyjit::device());
  auto meta = torch::empty({64}, torch::kMeta);
  torch::NoGradGuard no_grad;
  run(lazy);  // warm the meta-shape memo and allocators
  lazyjit::sync();
  run(meta);
  double best_lazy = 1e30, best_meta = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    best_lazy = std::min(best_lazy, per_op_ns(n, [&] { run(lazy); }));
    lazyjit::sync();
    best_meta = std::min(best_meta, per_op_ns(n, [&] { run(meta); }));
  }
  std::printf("{\"ops\": %d, \"lazyjit_ns_per_op\": %.1f, \"meta_dispatch_ns_per_op\": %.1f, "
              "\"lazyjit_own_ns_per_op\": %.1f}\n",
              n, best_lazy, best_meta, best_lazy - best_meta);
  return 0;
}
