// The c10d backend of the lazyjit device: c10d's eager API (`dist.all_reduce(t)`,
// `dist.scatter`, DDP's reducer, DTensor's mesh_scatter, FSDP2's all-gathers)
// on lazyjit tensors, in a process group made by python/lazyjit/distributed.py.
// Each call records its collective (tracer/collectives.h) and copies the result
// into the tensors in place (recorded too). A collective's Work is complete at
// once: the values are pending in the graph, and reading them syncs it as with
// any lazyjit tensor; the collective runs at the next sync whether or not they
// are read. A send's or a receive's Work runs the graph it was recorded in when
// waited for (wait(), is_completed()), as eager's returns once the transfer is
// done: `dist.send`, `dist.recv` and `isend(...).wait()` move the data there,
// so a peer that receives or sends on CPU tensors, or enters a barrier, meets
// it. A barrier runs what was recorded first, through either backend (here,
// and python/lazyjit/distributed.py for c10d's barrier on the CPU backend).
// `recvAnysource` is not supported (c10d's error names it): which rank sends
// is only known once the program runs.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/library.h>

#include <string>
#include <vector>

#include "graph_ir/effects.h"
#include "tracer/collectives.h"
#include "tracer/lazy_storage.h"
#include "tracer/lazyjit.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer::collectives {
namespace {

using c10::IValue;

// The reduce op a collective of c10d's `op` records: PREMUL_SUM(f) (FSDP2's
// gradient divide factor) is a sum of each rank's tensor times f (premultiplied).
std::string recorded_op(const c10d::ReduceOp& op) {
  return op == c10d::ReduceOp::PREMUL_SUM ? "sum" : reduce_op_name(op);
}

// `t` as the collective of `op` reduces it: under PREMUL_SUM(f), t * f (recorded
// before the collective, so it runs in the same program); otherwise `t`.
at::Tensor premultiplied(const c10d::ReduceOp& op, const at::Tensor& t) {
  if (op != c10d::ReduceOp::PREMUL_SUM) return t;
  TORCH_CHECK(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()),
              "lazyjit: ReduceOp.PREMUL_SUM needs a floating-point tensor, got ", t.scalar_type());
  // NCCLPreMulSumSupplement: the struct's name up to torch 2.11, an alias of
  // its new name (PreMulSumSupplement) in 2.13; the one name both have.
  auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(s, "lazyjit: ReduceOp.PREMUL_SUM without its factor (make it with _make_nccl_premul_sum)");
  if (s->tensor_factor.defined()) return t * s->tensor_factor.reshape({}).to(t.scalar_type());
  return t * s->double_factor;
}

// Complete at once: the results are pending values of the graph.
class RecordedWork : public c10d::Work {
 public:
  RecordedWork(std::vector<at::Tensor> result, c10d::OpType type)
      : Work(-1, type), result_(std::move(result)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
    future_->markCompleted(IValue(result_));
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds) override { return true; }
  std::vector<at::Tensor> result() override { return result_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> result_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Runs the pending graph of the calling thread when it holds a collective or a
// point-to-point op (what a barrier must see done first); `why` is the sync's
// reason in the metrics.
void run_recorded(const char* why) {
  const std::string site = TraceContext::call_site();  // before the lock: it takes the GIL
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  TraceContext& ctx = TraceContext::get();
  if (ir::holds_effects(ctx.graph())) ctx.sync(why, site);
}

// A send's or a receive's (alone, or the end of a batch_isend_irecv): waiting
// for it runs the graph it was recorded in, if that has not run yet (`point`
// names that graph as an event's point does, tracer/streams.cpp), with
// everything recorded before it: the transfer is done when wait() returns, as
// for CPU tensors. is_completed() does the same (a loop polling it ends).
class PointToPointWork : public RecordedWork {
 public:
  PointToPointWork(std::vector<at::Tensor> result, c10d::OpType type, TraceContext* recorded_in)
      : RecordedWork(std::move(result), type) {
    std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
    if (recorded_in && recorded_in->has_pending()) recorded_in->mark_pending(point_);
  }
  bool isCompleted() override {
    run();
    return true;
  }
  bool wait(std::chrono::milliseconds) override {
    run();
    return true;
  }

 private:
  void run() {
    const std::string site = TraceContext::call_site();
    std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
    if (TraceContext* owner = TraceContext::pending_owner(point_)) owner->sync("wait() on a send or recv", site);
  }
  LazyStorage point_{0, at::kByte, 0};
};

// The context whose pending graph holds `t` (a collective's result just
// recorded), or null when it already ran (step mode).
TraceContext* recorded_in(const at::Tensor& t) {
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  return TraceContext::pending_owner(storage_of(t));
}

class LazyjitBackend : public c10d::Backend {
 public:
  LazyjitBackend(int rank, int size) : Backend(rank, size) {}

  const std::string getBackendName() const override { return "lazyjit"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    TORCH_CHECK(opts.rootTensor == 0, "lazyjit: broadcast: one tensor per rank (root_tensor 0)");
    for (at::Tensor& t : tensors) t.copy_(collectives::broadcast(t, opts.rootRank, group()));
    return done(tensors, c10d::OpType::BROADCAST);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    std::string op = recorded_op(opts.reduceOp);
    for (at::Tensor& t : tensors) t.copy_(all_reduce(premultiplied(opts.reduceOp, t), op, group()));
    return done(tensors, c10d::OpType::ALLREDUCE);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    std::string op = recorded_op(opts.reduceOp);
    for (at::Tensor& t : tensors) t.copy_(all_reduce(premultiplied(opts.reduceOp, t), op, group()));
    return done(tensors, c10d::OpType::ALLREDUCE_COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "lazyjit: allgather: one output list per input");
    std::vector<at::Tensor> flat_out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      TORCH_CHECK(static_cast<int>(outputs[i].size()) == size_, "lazyjit: allgather: ", outputs[i].size(),
                  " outputs for a group of ", size_);
      at::Tensor g = all_gather(inputs[i].reshape({1, -1}), size_, group());
      for (int r = 0; r < size_; ++r) {
        outputs[i][r].copy_(g[r].view(outputs[i][r].sizes()));
        flat_out.push_back(outputs[i][r]);
      }
    }
    return done(flat_out, c10d::OpType::ALLGATHER);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    TORCH_CHECK(output.numel() == input.numel() * size_, "lazyjit: all_gather_into_tensor: the output has ",
                output.numel(), " elements, not the input's ", input.numel(), " times the group size ", size_);
    at::Tensor in = input.dim() == 0 ? input.reshape({1}) : input;
    output.copy_(all_gather(in, size_, group()).view(output.sizes()));
    return done({output}, c10d::OpType::_ALLGATHER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    for (size_t i = 0; i < inputs.size(); ++i) _allgather_base(outputs.at(i), inputs[i], opts);
    return done(outputs, c10d::OpType::COALESCED);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "lazyjit: reduce_scatter: one input list per output");
    std::string op = recorded_op(opts.reduceOp);
    for (size_t i = 0; i < outputs.size(); ++i) {
      TORCH_CHECK(static_cast<int>(inputs[i].size()) == size_, "lazyjit: reduce_scatter: ", inputs[i].size(),
                  " inputs for a group of ", size_);
      std::vector<at::Tensor> rows;
      for (const at::Tensor& t : inputs[i]) rows.push_back(t.reshape({1, -1}));
      at::Tensor r = collectives::reduce_scatter(premultiplied(opts.reduceOp, at::cat(rows)), op, size_, group());
      outputs[i].copy_(r.view(outputs[i].sizes()));
    }
    return done(outputs, c10d::OpType::REDUCE_SCATTER);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(input.numel() == output.numel() * size_, "lazyjit: reduce_scatter_tensor: the input has ",
                input.numel(), " elements, not the output's ", output.numel(), " times the group size ", size_);
    at::Tensor in = input.dim() == 0 ? input.reshape({1}) : input;
    output.copy_(collectives::reduce_scatter(premultiplied(opts.reduceOp, in), recorded_op(opts.reduceOp), size_, group())
                     .view(output.sizes()));
    return done({output}, c10d::OpType::_REDUCE_SCATTER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    for (size_t i = 0; i < inputs.size(); ++i) _reduce_scatter_base(outputs.at(i), inputs[i], opts);
    return done(outputs, c10d::OpType::COALESCED);
  }

  // The root's list, stacked, is one input; elsewhere the output, expanded,
  // stands for it (its values are not read).
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == 1, "lazyjit: scatter: one output tensor per rank, got ", outputs.size());
    at::Tensor& out = outputs[0];
    at::Tensor chunks;
    if (opts.rootRank == rank_) {
      TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_, "lazyjit: scatter: the source",
                  " needs one list of ", size_, " tensors");
      std::vector<at::Tensor> rows;
      for (const at::Tensor& t : inputs[0]) {
        check_lazy(t, "scatter");
        TORCH_CHECK(t.sizes() == out.sizes() && t.scalar_type() == out.scalar_type(), "lazyjit: scatter: an input",
                    " of ", t.sizes(), " ", t.scalar_type(), " for an output of ", out.sizes(), " ", out.scalar_type());
        rows.push_back(t.unsqueeze(0));
      }
      chunks = at::cat(rows);
    } else {
      TORCH_CHECK(inputs.empty() || inputs[0].empty(), "lazyjit: scatter: only the source rank passes tensors");
      std::vector<int64_t> sizes = out.sizes().vec();
      sizes.insert(sizes.begin(), size_);
      chunks = out.unsqueeze(0).expand(sizes);
    }
    out.copy_(collectives::scatter(chunks, opts.rootRank, group()));
    return done(outputs, c10d::OpType::SCATTER);
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    TORCH_CHECK(inputs.size() == 1, "lazyjit: gather: one input tensor per rank, got ", inputs.size());
    at::Tensor r = collectives::gather(inputs[0], opts.rootRank, group());
    if (opts.rootRank != rank_) {
      TORCH_CHECK(outputs.empty() || outputs[0].empty(), "lazyjit: gather: only the destination rank passes outputs");
      return done({}, c10d::OpType::GATHER);
    }
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_, "lazyjit: gather: the",
                " destination needs one list of ", size_, " tensors");
    for (int i = 0; i < size_; ++i) {
      at::Tensor& o = outputs[0][i];
      TORCH_CHECK(o.sizes() == inputs[0].sizes(), "lazyjit: gather: an output of ", o.sizes(), " for an input of ",
                  inputs[0].sizes());
      o.copy_(r[i]);
    }
    return done(outputs[0], c10d::OpType::GATHER);
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1 && opts.rootTensor == 0, "lazyjit: reduce: one tensor per rank");
    std::string op = recorded_op(opts.reduceOp);
    tensors[0].copy_(collectives::reduce(premultiplied(opts.reduceOp, tensors[0]), op, opts.rootRank, group()));
    return done(tensors, c10d::OpType::REDUCE);
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits, const c10d::AllToAllOptions&) override {
    check_lazy(output, "all_to_all_single");
    at::Tensor r = collectives::all_to_all_single(input, out_splits, in_splits, group());
    TORCH_CHECK(output.sizes() == r.sizes(), "lazyjit: all_to_all_single: the output has sizes ", output.sizes(),
                ", what arrives ", r.sizes());
    output.copy_(r);
    return done({output}, c10d::OpType::ALLTOALL_BASE);
  }

  // Each rank's tensor, flattened, is a split of one all_to_all_single.
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override {
    TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
                "lazyjit: all_to_all: ", inputs.size(), " inputs and ", outputs.size(), " outputs for a group of ", size_);
    std::vector<at::Tensor> flat;
    std::vector<int64_t> in_splits, out_splits;
    for (int i = 0; i < size_; ++i) {
      check_lazy(inputs[i], "all_to_all");
      check_lazy(outputs[i], "all_to_all");
      TORCH_CHECK(inputs[i].scalar_type() == inputs[0].scalar_type() &&
                      outputs[i].scalar_type() == inputs[0].scalar_type(),
                  "lazyjit: all_to_all: tensors of different dtypes");
      flat.push_back(inputs[i].reshape({-1}));
      in_splits.push_back(inputs[i].numel());
      out_splits.push_back(outputs[i].numel());
    }
    at::Tensor r = collectives::all_to_all_single(at::cat(flat), out_splits, in_splits, group());
    int64_t at = 0;
    for (int i = 0; i < size_; ++i) {
      outputs[i].copy_(r.narrow(0, at, out_splits[i]).view(outputs[i].sizes()));
      at += out_splits[i];
    }
    return done(outputs, c10d::OpType::ALLTOALL);
  }

  // Recorded as any collective (programs start them in recorded order, never
  // dropped); waiting for the Work runs them (PointToPointWork).
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "lazyjit: send: one tensor, got ", tensors.size());
    at::Tensor r = collectives::send(tensors[0], dst, tag, group());
    return point_to_point(tensors, c10d::OpType::SEND, r);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "lazyjit: recv: one tensor, got ", tensors.size());
    at::Tensor r = collectives::recv(tensors[0], src, tag, group());
    tensors[0].copy_(r);
    return point_to_point(tensors, c10d::OpType::RECV, r);
  }

  // Coalescing (c10d's _coalescing_manager, batch_isend_irecv): the ops between
  // start and end are recorded one by one as they come, and the program runs
  // them in that order; there is nothing to launch at the end. With a send or
  // a receive among them, waiting for the end's Work runs them.
  void startCoalescing() override { coalesced_in_ = nullptr; }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    TraceContext* in = coalesced_in_;
    coalesced_in_ = nullptr;
    if (in) return c10::make_intrusive<PointToPointWork>(std::vector<at::Tensor>{}, c10d::OpType::COALESCED, in);
    return done({}, c10d::OpType::COALESCED);
  }

  // Everything recorded runs first (its collectives included), then the
  // group's CPU backend (Gloo) holds the barrier.
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    lazyjit::sync();
    auto pg = c10d::resolve_process_group(group());
    c10d::BarrierOptions cpu = opts;
    cpu.device = at::Device(at::kCPU);
    return pg->getBackend(c10::DeviceType::CPU)->barrier(cpu);
  }

 private:
  std::string group() const {
    const std::string& g = getGroupUid();
    TORCH_CHECK(!g.empty(), "lazyjit: the lazyjit backend's process group has no name yet");
    return g;
  }
  static c10::intrusive_ptr<c10d::Work> done(std::vector<at::Tensor> tensors, c10d::OpType type) {
    return c10::make_intrusive<RecordedWork>(std::move(tensors), type);
  }
  // The Work of a send or a receive whose node's result is `r`.
  c10::intrusive_ptr<c10d::Work> point_to_point(std::vector<at::Tensor> tensors, c10d::OpType type,
                                                const at::Tensor& r) {
    TraceContext* in = recorded_in(r);
    if (in) coalesced_in_ = in;  // outside coalescing, reset by the next startCoalescing
    return c10::make_intrusive<PointToPointWork>(std::move(tensors), type, in);
  }

  // Where the sends and receives since startCoalescing were recorded, if any.
  TraceContext* coalesced_in_ = nullptr;
};

void run_recorded_collectives() { run_recorded("a barrier (collectives recorded before it run first)"); }

// Gives process group `pg` (made by python/lazyjit/distributed.py, with Gloo
// for the CPU) the lazyjit backend for the lazyjit device.
void install_backend(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto b = c10::make_intrusive<LazyjitBackend>(pg->getRank(), pg->getSize());
  pg->setBackend(c10::DeviceType::PrivateUse1, c10d::ProcessGroup::BackendType::CUSTOM, b);
}

}  // namespace
}  // namespace lazyjit::tracer::collectives

TORCH_LIBRARY_FRAGMENT(lazyjit_c10d, m) {
  m.def("install_backend", lazyjit::tracer::collectives::install_backend);
  // Runs the calling thread's pending graph when it holds a collective or a
  // point-to-point op: python/lazyjit/distributed.py calls it before c10d's
  // barrier(), monitored_barrier() and destroy_process_group().
  m.def("run_recorded_collectives", lazyjit::tracer::collectives::run_recorded_collectives);
}
