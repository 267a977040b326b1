// A small lazy computation on the lazyjit device, checked against eager.
#include <ATen/ATen.h>

#include <iostream>

#include "tracer/lazyjit.h"

int main() {
  at::manual_seed(0);
  auto x = at::randn({32, 64}), w = at::randn({64, 64}), b = at::randn({64});
  auto eager = at::gelu(at::addmm(b, x, w)) + x;
  auto lx = x.to(lazyjit::device());
  auto y = at::gelu(at::addmm(b.to(lazyjit::device()), lx, w.to(lazyjit::device()))) + lx;  // recorded
  auto got = y.cpu();                                                                       // sync: compile (or load), run
  auto m = lazyjit::metrics();
  if (!at::allclose(got, eager, 1e-4, 1e-5) || m.counters.at("graphs_executed") != 1) {
    std::cerr << "FAILED: max |lazyjit - eager| = " << (got - eager).abs().max().item<float>() << "\n"
              << lazyjit::metrics_report();
    return 1;
  }
  std::cout << "OK: lazyjit matches eager (" << m.counters.at("ops_traced") << " ops traced, "
            << m.counters.at("graphs_executed") << " compiled graph run)\n";
  return 0;
}
