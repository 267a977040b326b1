// A captured program called on lazyjit tensors (torch.compile of a model on the
// lazyjit device, python/lazyjit/dynamo.py): the call binds the tensors' data
// to the program as it binds CPU tensors, and its results become lazyjit
// tensors again, with nothing recorded op by op.
//
//   auto data = data_views(args);        // runs what the thread recorded, if anything
//   auto outs = captured->run(data);     // writes into `data` reach `args`' storages
//   auto lazy = lazy_results(outs, args, data);
//
// Order: what the thread recorded before the call runs first (one sync, only
// when something is pending), so the program reads the values eager would and
// nothing recorded earlier reads what the program then writes.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace lazyjit {

// Per argument: a lazyjit tensor becomes a tensor viewing its materialized
// elements on the data device (the CPU; the GPU under the CUDA target), with
// its sizes, strides and offset; an undefined or other tensor stays as it is.
// Runs the calling thread's pending graph first when it has one, and makes each
// storage safe to write in place (another thread's graph that reads it keeps a
// copy). A lost storage (its sync failed) raises that failure.
std::vector<at::Tensor> data_views(const std::vector<at::Tensor>& args);

// Each of `outs` (the program's results on the data device; undefined ones stay
// so) as a lazyjit tensor: a view of the lazyjit argument whose data it views
// (data_views()[i] shares its memory), with the same sizes, strides and offset,
// or else a new lazyjit tensor that owns its memory (no copy). The calling
// thread's small ops then run at once until its next lazyjit.sync()
// (TraceContext::note_program_call).
std::vector<at::Tensor> lazy_results(std::vector<at::Tensor> outs, const std::vector<at::Tensor>& args,
                                     const std::vector<at::Tensor>& data);

}  // namespace lazyjit
