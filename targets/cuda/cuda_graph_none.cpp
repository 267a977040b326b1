// A build against a torch without CUDA, or with LAZYJIT_CUDA_GRAPHS_BUILD=OFF:
// no CUDA graphs (targets/cuda/cuda_graph.h).
#include <stdexcept>

#include "targets/cuda/cuda_graph.h"

namespace lazyjit::executor {

namespace {
constexpr const char* kNotBuilt =
    "lazyjit was built without CUDA graphs: the torch it was built against has no libtorch_cuda, or "
    "LAZYJIT_CUDA_GRAPHS_BUILD=OFF";
}

bool cuda_graphs_built(std::string* why) {
  if (why) *why = kNotBuilt;
  return false;
}

std::unique_ptr<CapturedRun> capture_cuda_graph(const std::function<void()>&) { throw std::runtime_error(kNotBuilt); }

}  // namespace lazyjit::executor
