// Where a CUDA program's code is loaded: a Program holds each kernel's image
// and launch data (targets/cuda/device_kernel.h), and the executor loads the image
// into the context of each device the kernel runs on, at its first run there.
// A module lives as long as the thunks that launch it (so, their programs) and
// is unloaded with the last of them (targets/cuda/driver.h: an unload waits for
// a CUDA graph capture under way to end).
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "targets/cuda/driver.h"
#include "targets/cuda/device_kernel.h"

namespace lazyjit::executor {

// One kernel image's modules, one per device it ran on. Thread-safe.
class ModuleLoads {
 public:
  // `dk`: a CUDA target's kernel; its image must outlive this (the program's
  // code owns it).
  explicit ModuleLoads(const lowering::DeviceKernel& dk);
  ModuleLoads(const ModuleLoads&) = delete;
  ModuleLoads& operator=(const ModuleLoads&) = delete;

  // The kernel's CUfunction in the context current on this thread, device
  // `device`'s (the caller made it current: launch_device_kernel's device
  // guard): its module is loaded there at the first call for `device`, found
  // after. `stream`: the CUstream it is about to launch on (a first run inside
  // a capture loads in relaxed mode and unloads nothing while that stream
  // captures: cuda_driver::load_module). Throws std::runtime_error naming the
  // kernel and device when the kernel has no image, or the driver refuses it
  // (its error log).
  void* function(int device, void* stream = nullptr);

  // The devices it is loaded on, in the order they were (for tests, metrics).
  std::vector<int> devices() const;

 private:
  struct Loaded {
    int device;
    std::shared_ptr<cuda_driver::Module> module;  // unloaded when the last reference goes
    void* function;                               // the CUfunction in `module`
  };
  std::string_view image_;
  std::string symbol_;
  mutable std::mutex mu_;      // held while loading: one load per device
  std::vector<Loaded> loaded_;  // a few devices: a list
};

// The ModuleLoads of `dk`'s image, shared by every thunk that launches it
// (equal kernels of several programs share their code, and a program bound to
// new sizes shares its program's): made at the first call, gone with the last
// holder. Thread-safe.
std::shared_ptr<ModuleLoads> module_loads(const lowering::DeviceKernel& dk);

}  // namespace lazyjit::executor
