// The C++ example of docs/cpp.md: record, sync, check against eager.
#include <torch/torch.h>

#include <iostream>

#include "tracer/lazyjit.h"

int main() {
  torch::manual_seed(0);
  auto w = torch::randn({64, 64}), b = torch::randn({64}), x = torch::randn({32, 64});
  auto eager = torch::gelu(torch::addmm(b, x, w)) + x;
  auto lw = w.to(lazyjit::device()), lb = b.to(lazyjit::device());
  for (int step = 0; step < 3; ++step) {
    auto lx = x.to(lazyjit::device());
    auto y = (torch::gelu(torch::addmm(lb, lx, lw)) + lx).cpu();  // .cpu() is the sync point
    std::cout << "C++ step " << step << ": max |lazyjit - eager| = "
              << (y - eager).abs().max().item<float>() << "\n";
  }
  // lazyjit::metrics_report() is the whole report: every counter, sync site, timing.
  auto m = lazyjit::metrics();
  std::cout << "lazyjit: " << m.counters["ops_traced"] << " ops traced, " << m.counters["syncs"] << " syncs; "
            << m.counters["compiles"] << " compiles, " << m.counters["disk_hits"] << " disk loads, "
            << m.counters["cache_hits"] << " cache hits\n";
  return 0;
}
