// CUDA graphs through PyTorch's at::cuda::CUDAGraph (targets/cuda/cuda_graph.h).
// Built only when the torch CMake found has CUDA (cmake/torch.cmake).
#include "targets/cuda/cuda_graph.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>
#include <mutex>

#include "targets/cuda/driver.h"

namespace lazyjit::executor {

namespace {

// A CUDAGraph that can undo a capture that failed. When the captured body
// breaks the capture (an ATen op that synchronizes with the host, say),
// CUDAGraph::capture_end throws at cudaStreamEndCapture, before it ends the
// caching allocator's routing into the graph's pool and before the default
// generator leaves capture mode (torch 2.11's CUDAGraph.cpp): every later
// random draw on the GPU would then fail ("Offset increment outside graph
// capture") and frees would wait for a capture that never ends. The members
// that needs are protected, hence the subclass.
class CudaGraphRun : public CapturedRun, public at::cuda::CUDAGraph {
 public:
  void replay() override { at::cuda::CUDAGraph::replay(); }  // on the current stream

  // After capture_end threw: the pool stops taking allocations and is
  // released (its blocks return as their tensors die), and the generators
  // registered at capture_begin leave capture mode.
  // Each part on its own: one that fails (capture_end got further than
  // expected, say) must not stop the others or hide the capture's own error.
  void undo_failed_capture() noexcept {
    if (capture_ended_ || capture_dev_ == UNDEFINED_DEVICE) return;
    try {
      c10::cuda::CUDACachingAllocator::endAllocateToPool(capture_dev_, mempool_id_);
    } catch (...) {
    }
    try {
      c10::cuda::CUDACachingAllocator::releasePool(capture_dev_, mempool_id_);
    } catch (...) {
    }
    capture_dev_ = UNDEFINED_DEVICE;
    // CUDAGeneratorState::capture_epilogue is not exported by libtorch_cuda;
    // a capture that ends normally calls it for the generators it registered
    // (the default one: the same as ours), so one small capture does it.
    try {
      at::cuda::CUDAGraph reset;
      reset.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      at::empty({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA)).zero_();  // not an empty graph
      reset.capture_end();
    } catch (...) {
    }
  }
};

// One capture stream per device, for every capture: cuBLAS keys its
// workspaces by stream, so a new stream per capture would allocate a new
// workspace in each graph's pool.
c10::cuda::CUDAStream capture_stream(c10::DeviceIndex device) {
  static std::mutex mu;
  static std::map<c10::DeviceIndex, c10::cuda::CUDAStream> streams;
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams.find(device);
  if (it == streams.end()) it = streams.emplace(device, c10::cuda::getStreamFromPool(false, device)).first;
  return it->second;
}

}  // namespace

bool cuda_graphs_built(std::string* why) {
  if (why) why->clear();
  return true;
}

std::unique_ptr<CapturedRun> capture_cuda_graph(const std::function<void()>& body) {
  auto run = std::make_unique<CudaGraphRun>();
  c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
  c10::cuda::CUDAStream side = capture_stream(current.device_index());
  // The capture reads what the current stream wrote (the static inputs).
  c10::Event inputs_ready(c10::DeviceType::CUDA);
  inputs_ready.record(current);
  inputs_ready.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    // A private pool: the graph's buffers (its results among them) are its own
    // and keep their addresses for every replay. Thread-local capture mode:
    // other threads' CUDA calls (a background compile loading a module, a
    // DataLoader pinning memory) neither fail nor break this capture.
    // Modules dropped meanwhile (another thread's program evicted) are
    // unloaded after it: an unload, and the wait before it, would break it.
    struct DeferUnloads {
      DeferUnloads() { cuda_driver::capture_began(); }
      ~DeferUnloads() { cuda_driver::capture_ended(); }
    } defer_unloads;
    run->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      body();
    } catch (...) {
      try {
        run->capture_end();  // ends the stream capture; the graph is invalid and dropped
      } catch (...) {
      }
      run->undo_failed_capture();
      throw;
    }
    try {
      run->capture_end();
    } catch (...) {
      run->undo_failed_capture();
      throw;
    }
  }
  c10::Event captured(c10::DeviceType::CUDA);
  captured.record(side);
  captured.block(current);
  return run;
}

}  // namespace lazyjit::executor
