// Collectives on lazyjit tensors (torch.distributed).
//
// A collective is a node of the graph being recorded: an ATen library step of
// one of the ops `lazyjit_c10d::*` below, whose CPU kernel calls PyTorch's
// functional collective (`_c10d_functional::*`, which resolves the process
// group by name and runs on its CPU backend: Gloo), then waits for it. So the
// work before and after a collective stays in one compiled program, and the
// executor runs the program's library steps in recorded order, which is the
// order every rank issues its collectives in (the same code records the same
// graph on every rank).
//
// Two ways in:
// - `_c10d_functional::*` on lazyjit tensors (torch.distributed's functional
//   collectives, what traced code calls): PrivateUse1 kernels here record them;
//   `wait_tensor` is the identity (the value is the graph's).
// - c10d's eager API (`dist.all_reduce(t)`, DDP's reducer, broadcasts of
//   parameters): `LazyjitBackend`, the c10d backend of the `lazyjit` device in a
//   process group made by python/lazyjit/distributed.py, records the same nodes
//   and copies their results into the tensors in place (recorded too). Its
//   Work objects are complete at once: the values are pending in the graph,
//   and reading them syncs it as with any lazyjit tensor.
//
// The metrics count each collective a program runs under the timing
// "collective <op>" (calls, and the time spent starting it), and the time
// programs waited for collectives in flight under "collective wait"; the
// report sums them.
#include <ATen/ATen.h>
#include <c10/core/DispatchKey.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/library.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "debug/metrics.h"
#include "tracer/aten_node.h"
#include "tracer/lazy_storage.h"
#include "tracer/lazyjit.h"
#include "tracer/op_info.h"
#include "tracer/step_mode.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using c10::IValue;
using torch::jit::Stack;

namespace {

constexpr const char* kSupportedReduceOps = "sum, avg, product, min, max, band, bor, bxor";

// The reduce ops of _c10d_functional's string form that Gloo runs (avg as a sum
// divided by the group's size).
void check_reduce_op(const std::string& op, const at::Tensor& t) {
  static const char* ok[] = {"sum", "avg", "product", "min", "max", "band", "bor", "bxor"};
  bool known = false;
  for (const char* k : ok) known |= op == k;
  TORCH_CHECK(known, "lazyjit: reduce op '", op, "' is not supported on lazyjit tensors (supported: ",
              kSupportedReduceOps, ")");
  TORCH_CHECK(op != "avg" || at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()),
              "lazyjit: reduce op avg needs a floating-point tensor, got ", t.scalar_type());
  TORCH_CHECK(!(op == "band" || op == "bor" || op == "bxor") || !at::isFloatingType(t.scalar_type()),
              "lazyjit: reduce op ", op, " needs an integer or bool tensor, got ", t.scalar_type());
}

std::string reduce_op_name(const c10d::ReduceOp& op) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM: return "sum";
    case c10d::ReduceOp::AVG: return "avg";
    case c10d::ReduceOp::PRODUCT: return "product";
    case c10d::ReduceOp::MIN: return "min";
    case c10d::ReduceOp::MAX: return "max";
    case c10d::ReduceOp::BAND: return "band";
    case c10d::ReduceOp::BOR: return "bor";
    case c10d::ReduceOp::BXOR: return "bxor";
    case c10d::ReduceOp::PREMUL_SUM: break;
    default: break;
  }
  TORCH_CHECK(false, "lazyjit: ReduceOp.",
              static_cast<c10d::ReduceOp::RedOpType>(op) == c10d::ReduceOp::PREMUL_SUM ? "PREMUL_SUM" : "UNUSED",
              " is not supported on lazyjit tensors (supported: ", kSupportedReduceOps, ")");
}

// A group argument of _c10d_functional (`Any`): its name, or the name of the
// ProcessGroup object passed. The group must exist when the collective is
// recorded (it runs later, under this name).
std::string group_name_of(const IValue& g) {
  std::string name;
  if (g.isString()) {
    name = g.toStringRef();
  } else if (g.isCustomClass()) {
    name = g.toCustomClass<c10d::ProcessGroup>()->getGroupName();
  } else {
    TORCH_CHECK(false, "lazyjit: a collective's group must be a group name or a ProcessGroup, got ", g.tagKind());
  }
  c10d::resolve_process_group(name);  // throws, naming it, when there is no such group
  return name;
}

int64_t group_size_of(const std::string& name) { return c10d::resolve_process_group(name)->getSize(); }

const c10::OperatorHandle& handle(const char* name) {
  // The ops are registered at load; handles are looked up on first use.
  static std::mutex mu;
  static std::map<std::string, c10::OperatorHandle> handles;
  std::lock_guard<std::mutex> g(mu);
  auto it = handles.find(name);
  if (it == handles.end()) {
    std::string full = name;
    auto dot = full.find('.');
    it = handles
             .emplace(name, c10::Dispatcher::singleton().findSchemaOrThrow(
                                full.substr(0, dot).c_str(), dot == std::string::npos ? "" : full.substr(dot + 1).c_str()))
             .first;
  }
  return it->second;
}

void check_lazy(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "lazyjit: ", what, ": an undefined tensor");
  TORCH_CHECK(is_lazy(t), "lazyjit: ", what, " on the lazyjit backend got a tensor on ", t.device(),
              "; the lazyjit backend takes lazyjit tensors (CPU tensors go to the group's Gloo backend)");
  TORCH_CHECK(t.layout() == at::kStrided, "lazyjit: ", what, " of a sparse tensor is not supported");
}

// Records collective `op` (a lazyjit_c10d op) on `args` (its first one the
// lazyjit input), whose result has `sizes`; in step mode runs it at once.
at::Tensor record_collective(const char* op_name, Stack args, at::IntArrayRef sizes) {
  const c10::OperatorHandle& op = handle(op_name);
  at::Tensor in = args.at(0).toTensor();
  check_lazy(in, op_name);
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  TraceContext::OpScope scope(args.data(), args.size());
  debug::Metrics::get().add(debug::Counter::OpsTraced);
  if (in.is_conj() || in.is_neg()) args[0] = in = in.resolve_conj().resolve_neg();
  if (lazyjit::mode() == Mode::Step) {
    Stack stack(args);
    run_eager(op, &stack, "step mode");
    return stack.back().toTensor();
  }
  Stack meta_rets{at::empty(sizes, in.options().device(at::kMeta))};
  Stack out;
  TraceContext& ctx = TraceContext::get();
  const auto first = static_cast<uint32_t>(ctx.graph().nodes().size());
  record_aten(op, op_info(op), args, args, meta_rets, &out);  // op_info(op).name is op_name
  if (TraceContext::wants_op_origins()) ctx.note_op_nodes(first, op_name);
  return out.at(0).toTensor();
}

at::Tensor all_reduce(const at::Tensor& t, const std::string& op, const std::string& group) {
  check_lazy(t, "all_reduce");
  check_reduce_op(op, t);
  return record_collective("lazyjit_c10d::all_reduce", {t, op, group}, t.sizes());
}

std::vector<int64_t> scaled_dim0(const at::Tensor& t, int64_t num, int64_t den, const char* what) {
  TORCH_CHECK(t.dim() >= 1, "lazyjit: ", what, " of a 0-d tensor");
  std::vector<int64_t> s = t.sizes().vec();
  TORCH_CHECK(s[0] * num % den == 0, "lazyjit: ", what, ": dim 0 (", s[0], ") is not divisible by the group size (",
              den, ")");
  s[0] = s[0] * num / den;
  return s;
}

at::Tensor all_gather(const at::Tensor& t, int64_t size, const std::string& group) {
  check_lazy(t, "all_gather_into_tensor");
  TORCH_CHECK(size == group_size_of(group), "lazyjit: all_gather_into_tensor: group_size ", size,
              " is not the size of group ", group, " (", group_size_of(group), ")");
  return record_collective("lazyjit_c10d::all_gather_into_tensor", {t, size, group},
                           scaled_dim0(t, size, 1, "all_gather_into_tensor"));
}

at::Tensor reduce_scatter(const at::Tensor& t, const std::string& op, int64_t size, const std::string& group) {
  check_lazy(t, "reduce_scatter_tensor");
  check_reduce_op(op, t);
  TORCH_CHECK(size == group_size_of(group), "lazyjit: reduce_scatter_tensor: group_size ", size,
              " is not the size of group ", group, " (", group_size_of(group), ")");
  return record_collective("lazyjit_c10d::reduce_scatter_tensor", {t, op, size, group},
                           scaled_dim0(t, 1, size, "reduce_scatter_tensor"));
}

at::Tensor broadcast(const at::Tensor& t, int64_t src, const std::string& group) {
  check_lazy(t, "broadcast");
  int64_t size = group_size_of(group);
  TORCH_CHECK(src >= 0 && src < size, "lazyjit: broadcast: source rank ", src, " is not in group ", group,
              " of size ", size);
  return record_collective("lazyjit_c10d::broadcast", {t, src, group}, t.sizes());
}

// ---- CPU kernels: what a program's collective step runs ----------------------

// Runs _c10d_functional op `name` on `args` and, unless `start_only`, waits for
// it; the time is counted under "collective <what>". Started only, the
// collective is in flight when this returns: `_c10d_functional::wait_tensor`
// on the result waits (programs run the `_start` forms, executor/collective_step.cpp).
at::Tensor run_functional(const char* name, const char* what, Stack args, bool start_only = false) {
  auto t0 = std::chrono::steady_clock::now();
  handle(name).callBoxed(&args);
  at::Tensor r = args.at(0).toTensor();
  if (!start_only) {
    Stack w{r};
    handle("_c10d_functional::wait_tensor").callBoxed(&w);
  }
  debug::Metrics::get().time(
      std::string("collective ") + what,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return r;
}

at::Tensor all_reduce_cpu(const at::Tensor& t, c10::string_view op, c10::string_view group) {
  std::string o(op), g(group);
  if (o == "avg") {  // Gloo has no AVG
    at::Tensor r = run_functional("_c10d_functional::all_reduce", "all_reduce", {t, std::string("sum"), g});
    return r.div_(group_size_of(g));
  }
  return run_functional("_c10d_functional::all_reduce", "all_reduce", {t, o, g});
}

at::Tensor all_gather_cpu(const at::Tensor& t, int64_t size, c10::string_view group) {
  return run_functional("_c10d_functional::all_gather_into_tensor", "all_gather", {t.contiguous(), size, std::string(group)});
}

at::Tensor reduce_scatter_cpu(const at::Tensor& t, c10::string_view op, int64_t size, c10::string_view group) {
  std::string o(op), g(group);
  if (o == "avg") {
    at::Tensor r = run_functional("_c10d_functional::reduce_scatter_tensor", "reduce_scatter",
                                  {t.contiguous(), std::string("sum"), size, g});
    return r.div_(size);
  }
  return run_functional("_c10d_functional::reduce_scatter_tensor", "reduce_scatter", {t.contiguous(), o, size, g});
}

at::Tensor broadcast_cpu(const at::Tensor& t, int64_t src, c10::string_view group) {
  return run_functional("_c10d_functional::broadcast", "broadcast", {t, src, std::string(group)});
}

// The `_start` forms: the same, left in flight (avg divides once done: it waits).
at::Tensor all_reduce_start_cpu(const at::Tensor& t, c10::string_view op, c10::string_view group) {
  if (op == "avg") return all_reduce_cpu(t, op, group);
  return run_functional("_c10d_functional::all_reduce", "all_reduce", {t, std::string(op), std::string(group)}, true);
}

at::Tensor all_gather_start_cpu(const at::Tensor& t, int64_t size, c10::string_view group) {
  return run_functional("_c10d_functional::all_gather_into_tensor", "all_gather",
                        {t.contiguous(), size, std::string(group)}, true);
}

at::Tensor reduce_scatter_start_cpu(const at::Tensor& t, c10::string_view op, int64_t size, c10::string_view group) {
  if (op == "avg") return reduce_scatter_cpu(t, op, size, group);
  return run_functional("_c10d_functional::reduce_scatter_tensor", "reduce_scatter",
                        {t.contiguous(), std::string(op), size, std::string(group)}, true);
}

at::Tensor broadcast_start_cpu(const at::Tensor& t, int64_t src, c10::string_view group) {
  return run_functional("_c10d_functional::broadcast", "broadcast", {t, src, std::string(group)}, true);
}

// ---- Meta kernels (shapes; recording computes them itself) --------------------

at::Tensor same_meta(const at::Tensor& t, c10::string_view, c10::string_view) { return at::empty_like(t); }
at::Tensor all_gather_meta(const at::Tensor& t, int64_t size, c10::string_view) {
  return at::empty(scaled_dim0(t, size, 1, "all_gather_into_tensor"), t.options());
}
at::Tensor reduce_scatter_meta(const at::Tensor& t, c10::string_view, int64_t size, c10::string_view) {
  return at::empty(scaled_dim0(t, 1, size, "reduce_scatter_tensor"), t.options());
}
at::Tensor broadcast_meta(const at::Tensor& t, int64_t, c10::string_view) { return at::empty_like(t); }

// ---- _c10d_functional on lazyjit tensors -------------------------------------

// Boxed kernels: the group argument is `Any`.
void functional_all_reduce(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  torch::jit::push(s, all_reduce(args[0].toTensor(), args[1].toStringRef(), group_name_of(args[2])));
}

void functional_all_reduce_(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  at::Tensor t = args[0].toTensor();
  t.copy_(all_reduce(t, args[1].toStringRef(), group_name_of(args[2])));
  torch::jit::push(s, t);
}

void functional_all_reduce_coalesced(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  std::string g = group_name_of(args[2]);
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : args[0].toTensorVector()) out.push_back(all_reduce(t, args[1].toStringRef(), g));
  torch::jit::push(s, out);
}

void functional_all_reduce_coalesced_(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  std::string g = group_name_of(args[2]);
  std::vector<at::Tensor> ts = args[0].toTensorVector();
  for (at::Tensor& t : ts) t.copy_(all_reduce(t, args[1].toStringRef(), g));
  torch::jit::push(s, ts);
}

void functional_all_gather(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  torch::jit::push(s, all_gather(args[0].toTensor(), args[1].toInt(), group_name_of(args[2])));
}

void functional_all_gather_out(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 4);
  at::Tensor out = args[3].toTensor();
  at::Tensor r = all_gather(args[0].toTensor(), args[1].toInt(), group_name_of(args[2]));
  const char* out_what = "all_gather_into_tensor_out";
  TORCH_CHECK(out.sizes() == r.sizes(), "lazyjit: ", out_what, ": out has sizes ", out.sizes(), ", the result ",
              r.sizes());
  out.copy_(r);
  torch::jit::push(s, out);
}

void functional_all_gather_coalesced(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  std::string g = group_name_of(args[2]);
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : args[0].toTensorVector()) out.push_back(all_gather(t, args[1].toInt(), g));
  torch::jit::push(s, out);
}

void functional_reduce_scatter(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 4);
  torch::jit::push(s, reduce_scatter(args[0].toTensor(), args[1].toStringRef(), args[2].toInt(), group_name_of(args[3])));
}

void functional_reduce_scatter_out(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 5);
  at::Tensor out = args[4].toTensor();
  at::Tensor r = reduce_scatter(args[0].toTensor(), args[1].toStringRef(), args[2].toInt(), group_name_of(args[3]));
  const char* out_what = "reduce_scatter_tensor_out";
  TORCH_CHECK(out.sizes() == r.sizes(), "lazyjit: ", out_what, ": out has sizes ", out.sizes(), ", the result ",
              r.sizes());
  out.copy_(r);
  torch::jit::push(s, out);
}

void functional_reduce_scatter_coalesced(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 4);
  std::string g = group_name_of(args[3]);
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : args[0].toTensorVector())
    out.push_back(reduce_scatter(t, args[1].toStringRef(), args[2].toInt(), g));
  torch::jit::push(s, out);
}

void functional_broadcast(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  torch::jit::push(s, broadcast(args[0].toTensor(), args[1].toInt(), group_name_of(args[2])));
}

void functional_broadcast_(const c10::OperatorHandle&, Stack* s) {
  auto args = torch::jit::pop(*s, 3);
  at::Tensor t = args[0].toTensor();
  t.copy_(broadcast(t, args[1].toInt(), group_name_of(args[2])));
  torch::jit::push(s, t);
}

// The value a recorded collective made is already the graph's: nothing to wait for.
void functional_wait_tensor(const c10::OperatorHandle&, Stack*) {}

void functional_unsupported(const c10::OperatorHandle& op, Stack*) {
  TORCH_CHECK(false, "lazyjit: ", op.schema().name(),
              " on lazyjit tensors is not supported (supported collectives: all_reduce, all_gather_into_tensor, "
              "reduce_scatter_tensor, broadcast, and their coalesced and in-place forms; barrier)");
}

// ---- The c10d backend of the lazyjit device -----------------------------------

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

class LazyjitBackend : public c10d::Backend {
 public:
  LazyjitBackend(int rank, int size) : Backend(rank, size) {}

  const std::string getBackendName() const override { return "lazyjit"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    TORCH_CHECK(opts.rootTensor == 0, "lazyjit: broadcast: one tensor per rank (root_tensor 0)");
    for (at::Tensor& t : tensors) t.copy_(tracer::broadcast(t, opts.rootRank, group()));
    return done(tensors, c10d::OpType::BROADCAST);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    std::string op = reduce_op_name(opts.reduceOp);
    for (at::Tensor& t : tensors) t.copy_(all_reduce(t, op, group()));
    return done(tensors, c10d::OpType::ALLREDUCE);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    std::string op = reduce_op_name(opts.reduceOp);
    for (at::Tensor& t : tensors) t.copy_(all_reduce(t, op, group()));
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
    std::string op = reduce_op_name(opts.reduceOp);
    for (size_t i = 0; i < outputs.size(); ++i) {
      TORCH_CHECK(static_cast<int>(inputs[i].size()) == size_, "lazyjit: reduce_scatter: ", inputs[i].size(),
                  " inputs for a group of ", size_);
      std::vector<at::Tensor> rows;
      for (const at::Tensor& t : inputs[i]) rows.push_back(t.reshape({1, -1}));
      at::Tensor r = tracer::reduce_scatter(at::cat(rows), op, size_, group());
      outputs[i].copy_(r.view(outputs[i].sizes()));
    }
    return done(outputs, c10d::OpType::REDUCE_SCATTER);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(input.numel() == output.numel() * size_, "lazyjit: reduce_scatter_tensor: the input has ",
                input.numel(), " elements, not the output's ", output.numel(), " times the group size ", size_);
    at::Tensor in = input.dim() == 0 ? input.reshape({1}) : input;
    output.copy_(tracer::reduce_scatter(in, reduce_op_name(opts.reduceOp), size_, group()).view(output.sizes()));
    return done({output}, c10d::OpType::_REDUCE_SCATTER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    for (size_t i = 0; i < inputs.size(); ++i) _reduce_scatter_base(outputs.at(i), inputs[i], opts);
    return done(outputs, c10d::OpType::COALESCED);
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
};

// Gives process group `pg` (made by python/lazyjit/distributed.py, with Gloo
// for the CPU) the lazyjit backend for the lazyjit device.
void install_backend(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto b = c10::make_intrusive<LazyjitBackend>(pg->getRank(), pg->getSize());
  pg->setBackend(c10::DeviceType::PrivateUse1, c10d::ProcessGroup::BackendType::CUSTOM, b);
}

}  // namespace

TORCH_LIBRARY(lazyjit_c10d, m) {
  m.def("all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor");
  m.def("all_gather_into_tensor(Tensor input, int group_size, str group_name) -> Tensor");
  m.def("reduce_scatter_tensor(Tensor input, str reduce_op, int group_size, str group_name) -> Tensor");
  m.def("broadcast(Tensor input, int src, str group_name) -> Tensor");
  // What a program's step runs: the same, in flight on return (executor/collective_in_flight.cpp waits).
  m.def("all_reduce_start(Tensor input, str reduce_op, str group_name) -> Tensor");
  m.def("all_gather_into_tensor_start(Tensor input, int group_size, str group_name) -> Tensor");
  m.def("reduce_scatter_tensor_start(Tensor input, str reduce_op, int group_size, str group_name) -> Tensor");
  m.def("broadcast_start(Tensor input, int src, str group_name) -> Tensor");
  m.def("install_backend", install_backend);
}

TORCH_LIBRARY_IMPL(lazyjit_c10d, CPU, m) {
  m.impl("all_reduce", all_reduce_cpu);
  m.impl("all_gather_into_tensor", all_gather_cpu);
  m.impl("reduce_scatter_tensor", reduce_scatter_cpu);
  m.impl("broadcast", broadcast_cpu);
  m.impl("all_reduce_start", all_reduce_start_cpu);
  m.impl("all_gather_into_tensor_start", all_gather_start_cpu);
  m.impl("reduce_scatter_tensor_start", reduce_scatter_start_cpu);
  m.impl("broadcast_start", broadcast_start_cpu);
}

TORCH_LIBRARY_IMPL(lazyjit_c10d, Meta, m) {
  m.impl("all_reduce", same_meta);
  m.impl("all_gather_into_tensor", all_gather_meta);
  m.impl("reduce_scatter_tensor", reduce_scatter_meta);
  m.impl("broadcast", broadcast_meta);
}

TORCH_LIBRARY_IMPL(_c10d_functional, PrivateUse1, m) {
  using torch::CppFunction;
  m.impl("all_reduce", CppFunction::makeFromBoxedFunction<&functional_all_reduce>());
  m.impl("all_reduce_", CppFunction::makeFromBoxedFunction<&functional_all_reduce_>());
  m.impl("all_reduce_coalesced", CppFunction::makeFromBoxedFunction<&functional_all_reduce_coalesced>());
  m.impl("all_reduce_coalesced_", CppFunction::makeFromBoxedFunction<&functional_all_reduce_coalesced_>());
  m.impl("all_gather_into_tensor", CppFunction::makeFromBoxedFunction<&functional_all_gather>());
  m.impl("all_gather_into_tensor_out", CppFunction::makeFromBoxedFunction<&functional_all_gather_out>());
  m.impl("all_gather_into_tensor_coalesced", CppFunction::makeFromBoxedFunction<&functional_all_gather_coalesced>());
  m.impl("reduce_scatter_tensor", CppFunction::makeFromBoxedFunction<&functional_reduce_scatter>());
  m.impl("reduce_scatter_tensor_out", CppFunction::makeFromBoxedFunction<&functional_reduce_scatter_out>());
  m.impl("reduce_scatter_tensor_coalesced",
         CppFunction::makeFromBoxedFunction<&functional_reduce_scatter_coalesced>());
  m.impl("broadcast", CppFunction::makeFromBoxedFunction<&functional_broadcast>());
  m.impl("broadcast_", CppFunction::makeFromBoxedFunction<&functional_broadcast_>());
  m.impl("wait_tensor", CppFunction::makeFromBoxedFunction<&functional_wait_tensor>());
  m.impl("all_to_all_single", CppFunction::makeFromBoxedFunction<&functional_unsupported>());
  m.impl("isend", CppFunction::makeFromBoxedFunction<&functional_unsupported>());
  m.impl("irecv", CppFunction::makeFromBoxedFunction<&functional_unsupported>());
  m.impl("batch_p2p_ops", CppFunction::makeFromBoxedFunction<&functional_unsupported>());
}

}  // namespace lazyjit::tracer
