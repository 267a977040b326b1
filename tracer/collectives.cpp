// Collectives on lazyjit tensors (torch.distributed): recording, and the helpers
// the files of the other concerns share (tracer/collectives.h).
//
// A collective is a node of the graph being recorded: an ATen library step of
// one of the ops `lazyjit_c10d::*`, whose CPU kernel (collectives_cpu.cpp) runs
// it on the process group's CPU backend (Gloo), then waits for it. So the work
// before and after a collective stays in one compiled program, and the
// executor runs the program's library steps in recorded order: the order this
// rank's code issued its collectives in. A collective is never dead code
// (ir::has_effects, graph_ir/effects.h): it runs at the next sync whether or not
// anything reads its result, so a rank that drops one (a metric only rank 0
// prints, an exception caught after an all_reduce, a send, a rank that is not
// a gather's root) still runs it, and every later collective pairs with the
// other ranks' as in eager. No graph pass merges two equal collectives.
//
// Two ways in:
// - `_c10d_functional::*` on lazyjit tensors (torch.distributed's functional
//   collectives, what DTensor and traced code call): collectives_functional.cpp.
// - c10d's eager API (`dist.all_reduce(t)`, `dist.scatter`, DDP's reducer,
//   broadcasts of parameters): `LazyjitBackend`, the c10d backend of the
//   `lazyjit` device (collectives_backend.cpp).
//
// The metrics count each collective a program runs under the timing
// "collective <op>" (calls, and the time spent starting it), and the time
// programs waited for collectives in flight under "collective wait"; the
// report sums them.
#include "tracer/collectives.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/library.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "debug/metrics.h"
#include "tracer/aten_node.h"
#include "tracer/lazy_storage.h"
#include "tracer/lazyjit.h"
#include "tracer/op_info.h"
#include "tracer/step_mode.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer::collectives {

using c10::IValue;
using torch::jit::Stack;

namespace {

constexpr const char* kSupportedReduceOps = "sum, avg, product, min, max, band, bor, bxor";

}  // namespace

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

// The group must exist when the collective is recorded (it runs later, under this name).
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
int64_t group_rank_of(const std::string& name) { return c10d::resolve_process_group(name)->getRank(); }

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

void check_rank(int64_t rank, const std::string& group, const char* what, const char* role) {
  int64_t size = group_size_of(group);
  TORCH_CHECK(rank >= 0 && rank < size, "lazyjit: ", what, ": ", role, " rank ", rank, " is not in group ", group,
              " of size ", size);
}

std::vector<int64_t> scaled_dim0(const at::Tensor& t, int64_t num, int64_t den, const char* what) {
  TORCH_CHECK(t.dim() >= 1, "lazyjit: ", what, " of a 0-d tensor");
  std::vector<int64_t> s = t.sizes().vec();
  TORCH_CHECK(s[0] * num % den == 0, "lazyjit: ", what, ": dim 0 (", s[0], ") is not divisible by the group size (",
              den, ")");
  s[0] = s[0] * num / den;
  return s;
}

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

// Runs _c10d_functional op `name` on `args` and, unless `start_only`, waits for
// it. Started only, the collective is in flight when this returns:
// `_c10d_functional::wait_tensor` on the result waits (programs run the
// `_start` forms, executor/collective_step.cpp).
at::Tensor run_functional(const char* name, const char* what, Stack args, bool start_only) {
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

// ---- Recording -----------------------------------------------------------------

// Reduce op avg: recorded as a sum, a collective that stays in flight as any
// other (executor/collective_in_flight.h), and a division by the group size, a
// node of its own. (The kernels' avg, collectives_cpu.cpp, divides once the sum
// is done: their `_start` form waits.) Eager Gloo's AVG gives the sum, divided.
// With a group of 2^k ranks the input is divided first: a division by a power
// of two is exact (short of subnormals), so the values are the same, and the
// division fuses with the work that made the input, where one after the sum
// would be the next step, waiting for the collective at once. Other groups
// divide the sum (the same order of operations as Gloo's).
static bool divides_first(const std::string& group) {
  int64_t n = group_size_of(group);
  return n > 0 && (n & (n - 1)) == 0;
}

at::Tensor all_reduce(const at::Tensor& t, const std::string& op, const std::string& group) {
  check_lazy(t, "all_reduce");
  check_reduce_op(op, t);
  if (op == "avg") {
    const int64_t n = group_size_of(group);
    if (divides_first(group))
      return record_collective("lazyjit_c10d::all_reduce", {t.div(n), std::string("sum"), group}, t.sizes());
    return record_collective("lazyjit_c10d::all_reduce", {t, std::string("sum"), group}, t.sizes()).div(n);
  }
  return record_collective("lazyjit_c10d::all_reduce", {t, op, group}, t.sizes());
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
  std::vector<int64_t> sizes = scaled_dim0(t, 1, size, "reduce_scatter_tensor");
  if (op == "avg") {
    if (divides_first(group))
      return record_collective("lazyjit_c10d::reduce_scatter_tensor", {t.div(size), std::string("sum"), size, group},
                               sizes);
    return record_collective("lazyjit_c10d::reduce_scatter_tensor", {t, std::string("sum"), size, group}, sizes)
        .div(size);
  }
  return record_collective("lazyjit_c10d::reduce_scatter_tensor", {t, op, size, group}, sizes);
}

at::Tensor broadcast(const at::Tensor& t, int64_t src, const std::string& group) {
  check_lazy(t, "broadcast");
  check_rank(src, group, "broadcast", "source");
  return record_collective("lazyjit_c10d::broadcast", {t, src, group}, t.sizes());
}

at::Tensor scatter(const at::Tensor& chunks, int64_t src, const std::string& group) {
  check_lazy(chunks, "scatter");
  check_rank(src, group, "scatter", "source");
  TORCH_CHECK(chunks.dim() >= 1 && chunks.size(0) == group_size_of(group), "lazyjit: scatter: ",
              chunks.dim() ? chunks.size(0) : 0, " chunks for a group of ", group_size_of(group));
  return record_collective("lazyjit_c10d::scatter", {chunks, src, group}, chunks.sizes().slice(1));
}

at::Tensor gather(const at::Tensor& t, int64_t dst, const std::string& group) {
  check_lazy(t, "gather");
  check_rank(dst, group, "gather", "destination");
  std::vector<int64_t> sizes{0};
  if (group_rank_of(group) == dst) {
    sizes = t.sizes().vec();
    sizes.insert(sizes.begin(), group_size_of(group));
  }
  return record_collective("lazyjit_c10d::gather", {t, dst, group}, sizes);
}

at::Tensor reduce(const at::Tensor& t, const std::string& op, int64_t dst, const std::string& group) {
  check_lazy(t, "reduce");
  check_reduce_op(op, t);
  check_rank(dst, group, "reduce", "destination");
  if (op != "avg") return record_collective("lazyjit_c10d::reduce", {t, op, dst, group}, t.sizes());
  at::Tensor sum =
      record_collective("lazyjit_c10d::reduce", {t, std::string("sum"), dst, group}, t.sizes());
  // The root's result is the average; elsewhere what the transport left, as before.
  return group_rank_of(group) == dst ? sum.div(group_size_of(group)) : sum;
}

// The rows each rank gets of a tensor of `rows` rows: `splits`, or even ones.
static std::vector<int64_t> splits_or_even(std::vector<int64_t> splits, int64_t rows, int64_t size, const char* which) {
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "lazyjit: all_to_all_single: dim 0 (", rows,
                ") is not divisible by the group size (", size, ") and no ", which, " split sizes were given");
    return std::vector<int64_t>(size, rows / size);
  }
  TORCH_CHECK(static_cast<int64_t>(splits.size()) == size, "lazyjit: all_to_all_single: ", splits.size(), " ", which,
              " split sizes for a group of ", size);
  for (int64_t s : splits) TORCH_CHECK(s >= 0, "lazyjit: all_to_all_single: a negative ", which, " split size, ", s);
  return splits;
}

at::Tensor all_to_all_single(const at::Tensor& t, std::vector<int64_t> out_splits, std::vector<int64_t> in_splits,
                             const std::string& group) {
  check_lazy(t, "all_to_all_single");
  TORCH_CHECK(t.dim() >= 1, "lazyjit: all_to_all_single of a 0-d tensor");
  const int64_t size = group_size_of(group);
  std::vector<int64_t> in = splits_or_even(in_splits, t.size(0), size, "input");
  TORCH_CHECK(std::accumulate(in.begin(), in.end(), int64_t{0}) == t.size(0), "lazyjit: all_to_all_single: the input",
              " split sizes ", c10::IntArrayRef(in), " do not add up to dim 0 (", t.size(0), ")");
  // Without output splits every rank sends as many rows as it holds, evenly: dim 0 stays.
  std::vector<int64_t> out = splits_or_even(out_splits, t.size(0), size, "output");
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes[0] = std::accumulate(out.begin(), out.end(), int64_t{0});
  // The node holds the splits each way explicitly (what the transport takes).
  return record_collective("lazyjit_c10d::all_to_all_single", {t, out, in, group}, sizes);
}

at::Tensor send(const at::Tensor& t, int64_t dst, int64_t tag, const std::string& group) {
  check_lazy(t, "send");
  check_rank(dst, group, "send", "destination");
  TORCH_CHECK(dst != group_rank_of(group), "lazyjit: send: destination rank ", dst, " is this rank");
  return record_collective("lazyjit_c10d::send", {t, dst, tag, group}, {0});
}

at::Tensor recv(const at::Tensor& like, int64_t src, int64_t tag, const std::string& group) {
  check_lazy(like, "recv");
  check_rank(src, group, "recv", "source");
  TORCH_CHECK(src != group_rank_of(group), "lazyjit: recv: source rank ", src, " is this rank");
  return record_collective("lazyjit_c10d::recv", {like, src, tag, group}, like.sizes());
}

}  // namespace lazyjit::tracer::collectives

