// CUDA graphs through PyTorch's at::cuda::CUDAGraph (executor/cuda_graph.h).
// Built only when the torch CMake found has CUDA (cmake/torch.cmake).
#include "executor/cuda_graph.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace lazyjit::executor {

namespace {

class CudaGraphRun : public CapturedRun {
 public:
  void replay() override { graph_.replay(); }  // on the current stream
  at::cuda::CUDAGraph graph_;
};

}  // namespace

bool cuda_graphs_built(std::string* why) {
  if (why) why->clear();
  return true;
}

std::unique_ptr<CapturedRun> capture_cuda_graph(const std::function<void()>& body) {
  auto run = std::make_unique<CudaGraphRun>();
  c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  // The capture reads what the current stream wrote (the static inputs).
  c10::Event inputs_ready(c10::DeviceType::CUDA);
  inputs_ready.record(current);
  inputs_ready.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    // A private pool: the graph's buffers (its results among them) are its own
    // and keep their addresses for every replay.
    run->graph_.capture_begin();
    try {
      body();
    } catch (...) {
      try {
        run->graph_.capture_end();  // ends the stream capture; the graph is invalid and dropped
      } catch (...) {
      }
      throw;
    }
    run->graph_.capture_end();
  }
  c10::Event captured(c10::DeviceType::CUDA);
  captured.record(side);
  captured.block(current);
  return run;
}

}  // namespace lazyjit::executor
