// The target programs run on, as one object: the host CPU (LAZYJIT_TARGET=cpu),
// an NVIDIA GPU (cuda), or the CUDA target's kernels run on a simulated GPU
// (cuda-sim: a test target; data and ATen steps stay on the host). Made once
// from LAZYJIT_TARGET. The tracer and the runtime ask it every question about
// the target (where data lives, which library kernels answer, which graph-pass
// rules hold, how code is made and run, what goes into keys); they test no
// target name and no device themselves.
//
// Its own files: backend.h and backend.cpp (the choice, and the targets'
// names); each target's answers are in its folder: targets/cpu/backend.cpp,
// targets/cuda/backend.cpp, targets/cuda_sim/backend.cpp.
#pragma once
#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/DispatchKey.h>

#include <memory>
#include <string>
#include <vector>

#include "executor/execution_target.h"
#include "lowering/pass_rules.h"
#include "lowering/target.h"

namespace lazyjit::runtime {

struct Config;

class Backend {
 public:
  virtual ~Backend() = default;
  // The LAZYJIT_TARGET it stands for: "cpu", "cuda" or "cuda-sim" (what
  // lazyjit.target() reports).
  virtual std::string name() const = 0;

  // Where lazyjit storages keep their data, ATen steps run and programs' results
  // go: the CPU, or the CUDA device PyTorch had current when it was made.
  virtual c10::Device data_device() const = 0;
  // Whether data_device() is host memory (the cpu and cuda-sim targets): data
  // can be shared between processes, read in place by the host.
  bool data_on_host() const { return data_device().is_cpu(); }
  // The dispatch key of ATen's kernels for data_device(): the library asked
  // what it would do for an op recorded there (which attention kernel it
  // takes, whether an op has a kernel there at all).
  virtual c10::DispatchKey library_key() const = 0;
  // Random ops on lazyjit draw from the generators of where data lives, so a
  // seeded program draws eager's numbers there.
  virtual const at::Generator& default_generator() const = 0;
  virtual at::Generator new_generator() const = 0;
  // The host memory pin_memory() gives: memory copies to data_device() are
  // fastest from (page-locked under CUDA, ordinary host memory otherwise).
  virtual c10::Allocator* pinned_host_allocator() const = 0;

  // The rules the graph passes need for where ATen steps run (pass_rules.h).
  virtual lowering::PassRules pass_rules() const = 0;
  // How a program's graph becomes code: the compile target (lowering/target.h).
  // Throws naming what is missing (LLVM's NVPTX back end, libdevice, ...).
  virtual std::unique_ptr<lowering::Target> make_target(const lowering::CodegenOptions& codegen) const = 0;
  // How a program's code becomes runnable steps (executor/execution_target.h):
  // where its ATen steps run, the thunk that runs its kernels, and whether a
  // replayable program's runs are replayed (`cuda_graphs`: LAZYJIT_CUDA_GRAPHS,
  // where the target has CUDA graphs).
  virtual executor::ExecutionTarget execution(bool cuda_graphs) const = 0;
  // Whether a replayable program may run as a CUDA graph (the graph-replay
  // verdict is reported in the sync log then).
  virtual bool captures_graphs() const { return false; }
  // What every cache key carries of the target: the compile target's
  // fingerprint (its name, architecture, LLVM version and codegen options).
  std::string fingerprint(const lowering::Target& target) const { return target.fingerprint(); }
};

// The targets' names, the default first ("cpu", "cuda", "cuda-sim"): what
// LAZYJIT_TARGET may name (runtime/config.cpp checks it against these).
const std::vector<std::string>& target_names();

// The backend `config.target` names. Throws a clear error when it cannot be
// used: an unknown name, or under cuda a CPU-only PyTorch, no driver, no GPU.
std::unique_ptr<Backend> make_backend(const Config& config);
// The process's backend (LAZYJIT_TARGET, runtime/config.h), made at first use.
const Backend& backend();

}  // namespace lazyjit::runtime
