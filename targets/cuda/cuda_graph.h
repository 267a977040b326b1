// Capturing a program's run as a CUDA graph with PyTorch's own
// at::cuda::CUDAGraph (a private memory pool of the caching allocator, cuBLAS
// workspaces and the philox RNG handled as torch.cuda.graphs handles them).
// No CUDA header here: targets/cuda/cuda_graph.cpp, which includes them, is built
// only when the torch CMake found has CUDA (libtorch_cuda); otherwise
// cuda_graph_none.cpp answers that this build has no CUDA graphs.
#pragma once
#include <functional>
#include <memory>
#include <string>

namespace lazyjit::executor {

// One captured run: replay() runs it again on PyTorch's current stream,
// reading and writing the same buffers as the captured run.
class CapturedRun {
 public:
  virtual ~CapturedRun() = default;
  virtual void replay() = 0;
};

// How a run is captured: `body` runs the program once (its kernels and ATen
// steps recorded, not run, under CUDA stream capture). Throws when the capture
// fails (an op that synchronizes with the host, say); the graph is then dropped.
using CaptureFn = std::function<std::unique_ptr<CapturedRun>(const std::function<void()>& body)>;

// Whether this build has CUDA graphs; when not, `why` says so.
bool cuda_graphs_built(std::string* why = nullptr);
// CUDA graphs through at::cuda::CUDAGraph, captured on a side stream that waits
// for the current one (a capture cannot run on the legacy default stream), the
// current stream then waiting for it. Throws when cuda_graphs_built() is false.
std::unique_ptr<CapturedRun> capture_cuda_graph(const std::function<void()>& body);

}  // namespace lazyjit::executor
