// The CUDA driver API (libcuda.so.1), loaded at run time with dlopen on first
// use: nothing here needs CUDA to build, and a process that never asks for the
// CUDA target never loads it. Every call works in the context current on the
// calling thread (PyTorch's primary context once it made one). Errors throw
// std::runtime_error naming the driver call and the CUDA error (cuGetErrorName).
// Includes nothing of lazyjit: targets/cuda/, executor/ and runtime/ use it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace lazyjit::cuda_driver {

// Whether the driver loads, initializes and sees at least one GPU; when not,
// `why` says which of these failed ("libcuda.so.1 not found: ...", "cuInit:
// CUDA_ERROR_NO_DEVICE"). Never throws.
bool available(std::string* why = nullptr);

// cuDriverGetVersion, e.g. 13000 for CUDA 13.0.
int driver_version();

// "sm_90" for the device of the current context (device 0 when none is current).
std::string current_arch();

// A loaded CUmodule, unloaded when the last reference goes.
class Module {
 public:
  virtual ~Module() = default;
  // The CUfunction named `name`; throws when the module has none.
  virtual void* function(const std::string& name) const = 0;
};

// Loads a cubin, or PTX text (then the driver JIT-compiles it), into the
// current context (device 0's primary context when none is current). A launch
// in another context (another GPU) loads it there first. A failed load's
// error holds the driver's error log. `stream`: the CUstream its kernels are
// about to launch on, if known (a first run inside a capture: modules waiting
// to be unloaded stay loaded while it captures). The load runs in relaxed
// stream-capture mode: a capture under way, on this thread or another, is
// neither refused nor broken by it.
std::shared_ptr<Module> load_module(const std::string& image, void* stream = nullptr);

// PTX to a cubin for the current device, by the driver's own assembler
// (cuLinkCreate/cuLinkAddData/cuLinkComplete): used when no ptxas is found.
std::string assemble(const std::string& ptx);

// cuLaunchKernel on `stream` (a CUstream; null: the legacy default stream), in
// the current context: `function`'s module is loaded there when it was loaded
// into another.
void launch(void* function, uint32_t grid, uint32_t block, uint32_t shared_bytes, void* stream, void** params);

// A CUDA graph capture begins and ends in this process (executor/cuda_graph.cpp).
// While one is under way, modules dropped are not unloaded (an unload waits
// for the streams lazyjit launched on, and a wait on a capturing stream, or in
// global or thread-local mode the unload itself, would break the capture):
// the last capture to end unloads them. A capture on any stream lazyjit
// launched on or loaded for (PyTorch's, around lazyjit's kernels, or begun
// later on such a stream) defers unloads the same way, until a later load or
// unload finds none capturing. Unloads run in relaxed stream-capture mode.
void capture_began();
void capture_ended();

}  // namespace lazyjit::cuda_driver
