// A function captured once, on placeholder tensors, as one lazyjit program, and
// then run on CPU tensors (CUDA tensors under the CUDA target) with no
// recording (torch.compile(backend="lazyjit"), python/lazyjit/dynamo.py):
//
//   Capture c;                                  // syncs what the thread recorded; no sync may happen inside
//   at::Tensor x = c.placeholder(example);      // one per tensor argument, in argument order
//   ... ops on x, recorded as on any lazyjit tensor ...
//   auto g = c.finish({y}, "model.py:12");      // the program: from the compile cache, or compiled
//   g->run({x_cpu})                             // CPU tensors in, CPU tensors out
//
// The graph goes through the same passes, kernels and cache as a sync's. What
// the trace read that is not a placeholder (constants, data moved to lazyjit
// while tracing) is bound as it was then; random draws made while tracing
// (dropout masks, rand) are drawn again on every run, in trace order.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "runtime/run_io.h"

namespace lazyjit {

// An argument of a captured function: a tensor, an int (a size Dynamo made
// symbolic), or anything else (ignored).
using CaptureArg = std::variant<std::monostate, at::Tensor, int64_t>;

class CapturedGraph {
 public:
  // The outputs, in the order finish() was given them, or nullopt when `args`
  // do not fit this capture (a tensor of other sizes, strides or dtype, another
  // int): the caller captures again for them. Outputs that the traced function
  // wrote into a placeholder (an in-place op on an argument) are written into
  // that argument. An op that fails raises eager's error.
  std::optional<std::vector<at::Tensor>> run(const std::vector<CaptureArg>& args) const;

  size_t ops() const { return ops_; }  // nodes in the traced graph

  // Whether an argument the traced function writes shares memory with another
  // argument (views of one buffer): a read of the other would miss the write,
  // so run() must not serve them. CaptureSet::run asks before run().
  bool writes_shared_argument(const std::vector<CaptureArg>& args) const;

  // What arguments that fit it have in common (capture_signature of them): the
  // key a CaptureSet finds it by.
  uint64_t signature() const;

 private:
  friend class Capture;
  struct ArgSpec {
    enum Kind { Other, Tensor, Int } kind = Other;
    at::ScalarType dtype{};
    std::vector<int64_t> sizes, strides;  // a tensor's, as captured
    bool flat = false;                    // bound as its storage's span (strided, overlapping or offset)
    int64_t span = 0;                     // that span's length, in elements
    int64_t value = 0;                    // an int's
  };
  c10::Device device_{c10::DeviceType::CPU};  // where its tensors live: the backend's data device at capture
  std::vector<ArgSpec> args_;
  std::vector<size_t> arg_input_;                  // per tensor argument: its graph input
  std::vector<at::Tensor> fixed_inputs_;           // every graph input as bound while tracing
  std::vector<std::pair<size_t, std::function<at::Tensor()>>> redraws_;  // input, its draw
  std::vector<int64_t> scalars_;
  // An output is computed (a graph output), a graph input returned as it is
  // (a constant), or, as in eager, the caller's tensor argument itself (Arg:
  // the function returned its argument, written or not) or a view of that
  // argument's memory (ArgView: x.t(), x[1:], also after an in-place update of
  // x, which run() writes into the argument before it returns).
  struct Output {
    enum Kind { Computed, Input, ArgView, Arg } kind = Computed;
    size_t index = 0;  // its graph output, graph input, or tensor argument
    std::vector<int64_t> sizes, strides;  // ArgView: the view of the argument's elements
    int64_t offset = 0;
  };
  std::vector<Output> outputs_;  // per returned output
  std::vector<std::pair<size_t, size_t>> write_back_;  // (tensor argument, graph output)
  // Per write_back_: the program's kernel may store the output straight into
  // the argument (executor/store_in_place.h), when no other argument shares
  // its memory; otherwise it is copied in after the run.
  std::vector<bool> in_place_;
  std::shared_ptr<const runtime::Executable> program_;
  int threads_ = 1;
  size_t ops_ = 0;
};

// A hash of the arguments' kinds, and of each tensor's dtype, sizes and strides
// and each int's value: equal for arguments that fit the same capture.
uint64_t capture_signature(const std::vector<CaptureArg>& args);

// Records the function's ops into the calling thread's graph, which must have
// nothing pending (the constructor syncs it). A sync while capturing (an op that
// needs a value, .item()) throws lazyjit::StrictError and nothing runs: the
// caller runs that function some other way. The destructor drops an unfinished
// capture.
class Capture {
 public:
  Capture();
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // A lazyjit tensor laid out like `example` (any device; its data is not read)
  // that stands for the next tensor argument.
  at::Tensor placeholder(const at::Tensor& example);
  // An argument that is not a tensor: an int stands for itself (a run with
  // another value does not fit), anything else is ignored.
  void other_arg(std::optional<int64_t> value);
  // Compiles (or finds in the compile cache) the program computing `outputs`,
  // lazyjit tensors recorded since the constructor. `site` names it in the
  // metrics and recompile explanations. `dynamic`: shape-generic kernels.
  std::shared_ptr<CapturedGraph> finish(const std::vector<at::Tensor>& outputs, const std::string& site,
                                              bool dynamic);

 private:
  std::shared_ptr<CapturedGraph> g_;
  std::vector<at::Tensor> placeholders_;
  bool open_ = true;
};

}  // namespace lazyjit
