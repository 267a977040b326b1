#include "tracer/record_op.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>

#include <optional>

#include "debug/metrics.h"
#include "debug/trace.h"
#include "runtime/config.h"
#include "runtime/runtime.h"
#include "tracer/aten_node.h"
#include "tracer/aten_to_ir.h"
#include "tracer/device_ops.h"
#include "tracer/ivalue_tensors.h"
#include "tracer/lazyjit.h"
#include "tracer/meta_inference.h"
#include "tracer/op_info.h"
#include "tracer/step_mode.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

using c10::IValue;
using torch::jit::Stack;

namespace {

// std::array<bool, N> arguments arrive boxed as generic lists; kernels unbox
// them as bool lists.
void unbox_bool_arrays(const c10::FunctionSchema& schema, Stack* stack) {
  size_t nargs = schema.arguments().size();
  for (size_t i = 0; i < nargs; ++i) {
    IValue& v = (*stack)[stack->size() - nargs + i];
    if (v.isList() && !v.isBoolList() && schema.arguments()[i].real_type()->str().rfind("bool[", 0) == 0) {
      c10::List<bool> l;
      for (const IValue& e : v.toListRef()) l.push_back(e.toBool());
      v = l;
    }
  }
}

// Index tensors may live on the CPU, as with CUDA: in a Tensor?[] they join the
// device (on the stack and in `args`).
void move_cpu_indices(Stack* stack, Stack* args) {
  size_t nargs = args->size();
  for (size_t i = 0; i < nargs; ++i) {
    IValue& v = (*stack)[stack->size() - nargs + i];
    if (!v.isOptionalTensorList()) continue;
    bool moved = false;
    IValue l = map_tensors(v, [&](const at::Tensor& t) {
      if (!t.defined() || !t.device().is_cpu() || t.dim() == 0) return t;
      moved = true;
      return t.to(lazyjit::device());
    });
    if (moved) v = l, (*args)[i] = l;
  }
}

// PyTorch's rule, as on CUDA: a lazyjit op accepts CPU tensors only when 0-d.
void check_devices(const Stack& args) {
  // Lazy tensors among a Tensor?[]'s elements alone do not make the check apply.
  bool lazy = false;
  for (const IValue& v : args)
    if (!v.isOptionalTensorList()) for_each_tensor(v, [&](const at::Tensor& t) { lazy |= is_lazy(t); });
  if (!lazy) return;
  for (const IValue& v : args)
    for_each_tensor(v, [](const at::Tensor& t) {
      if (t.defined() && t.device().is_cpu() && t.dim() != 0)
        TORCH_CHECK(false,
                    "Expected all tensors to be on the same device, but found at least two "
                    "devices, lazyjit:0 and cpu!");
    });
}

// The argument errors eager raises at the op, raised here too rather than at
// the next sync.
void check_args(const OpInfo& info, const c10::FunctionSchema& schema, const Stack& args) {
  if (info.sub_check == 1) at::native::sub_check(args[0].toTensor(), args[1].toTensor());
  if (info.sub_check == 2) at::native::sub_check(args[0].toTensor(), args[1].toScalar());
  check_devices(args);
  // Writes into a tensor whose elements share memory (an expanded view).
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (ai && ai->isWrite() && args[i].isTensor() && is_lazy(args[i].toTensor()))
      at::assert_no_internal_overlap(args[i].toTensor());
  }
}

// Whether an argument the op writes shares memory with one it reads, in part
// (x[1:].add_(x[:-1]), torch.add(a, b, out=a[1:])). What eager does then is up
// to the op's CPU kernel: most raise (TensorIterator's overlap rule), a few
// compute in place; running it, now, gives eager's error or eager's result.
bool writes_overlap_reads(const c10::FunctionSchema& schema, const Stack& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (!ai || !ai->isWrite() || !args[i].isTensor()) continue;
    const at::Tensor& w = args[i].toTensor();
    if (!is_lazy(w)) continue;
    for (size_t j = 0; j < args.size(); ++j) {
      if (j == i) continue;
      bool partial = false;
      for_each_tensor(args[j], [&](const at::Tensor& t) {
        partial |= t.defined() && !t.is_same(w) && is_lazy(t) && t.is_alias_of(w) &&
                   at::get_overlap_status(w, t) == at::MemOverlapStatus::Partial;
      });
      if (partial) return true;
    }
  }
  return false;
}

void record(const c10::OperatorHandle& op, const OpInfo& info, Stack* stack);

}  // namespace

void record_op(const c10::OperatorHandle& op, Stack* stack) {
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  const OpInfo& info = op_info(op);
  try {
    record(op, info, stack);
  } catch (c10::Error& e) {
    // An error at the op, as in eager, says which op and which line raised it.
    // Errors of other ops, raised by a sync this op needed, already say theirs.
    for (const std::string& c : e.context())
      if (c.rfind("lazyjit: raised by", 0) == 0) throw;
    std::string site = TraceContext::call_site();
    e.add_context("lazyjit: raised by " + info.name + (site.empty() ? "" : " at " + site) + ", when recorded");
    throw;
  }
}

namespace {

void record(const c10::OperatorHandle& op, const OpInfo& info, Stack* stack) {
  // The runtime starts with the first op, so LAZYJIT_TRACE's trace holds it.
  [[maybe_unused]] static const bool runtime_started = (runtime::Runtime::get(), true);
  std::optional<debug::TraceSpan> span;
  if (debug::trace_enabled()) span.emplace("record", info.name);
  if (info.bool_array_args) unbox_bool_arrays(op.schema(), stack);
  size_t nargs = op.schema().arguments().size();
  Stack args(stack->end() - nargs, stack->end());
  TraceContext::OpScope scope(args.data(), args.size());
  debug::Metrics::get().add(debug::Counter::OpsTraced);

  // Copies between devices are allowed in the device's own ops, so they come
  // before the argument checks.
  if (info.special && run_special_op(info.name, args, stack)) return;
  if (info.index) move_cpu_indices(stack, &args);
  check_args(info, op.schema(), args);
  if (lazyjit::mode() == Mode::Step) return run_eager(op, stack, "step mode");
  if (info.draws && draw_at_trace_time(op, info.name, stack)) return;
  if (needs_eager(info, args)) return run_eager(op, stack, "needs data");
  if (info.is_mutable && writes_overlap_reads(op.schema(), args))
    return run_eager(op, stack, "an argument it writes partially overlaps one it reads");
  // Shapes, dtypes and argument errors from PyTorch's meta kernels. Without a
  // usable one (none, or one that needs data: boolean masks) the op runs now;
  // a genuine argument error then raises from the CPU kernel, like eager.
  MetaResult unmemoized;
  const MetaResult* meta = infer_meta(op, args, &unmemoized);
  if (!meta) return run_eager(op, stack, "no usable meta kernel");
  // Meta kernels check shapes, not which dtypes the CPU kernel implements.
  if (meta->dtype_error) return run_eager(op, stack, "its CPU kernel rejects these dtypes");
  if (info.view) {
    if (!record_view(op, args, *meta, stack)) run_eager(op, stack, "view op with an unexpected result");
    return;
  }
  stack->erase(stack->end() - nargs, stack->end());
  TraceContext& ctx = TraceContext::get();
  const auto first = static_cast<uint32_t>(ctx.graph().nodes().size());
  if (!record_ir_nodes(info, args, *meta, stack)) record_aten(op, info.name, args, meta->args, meta->rets, stack);
  if (TraceContext::wants_op_origins()) ctx.note_op_nodes(first, info.name);
  // A runaway graph (a loop that never syncs) is cut here and run, so compile
  // time and memory stay bounded; the cut is counted with its reason. (A
  // failing step of it already names its own op.)
  if (static_cast<int64_t>(ctx.graph().nodes().size()) >= runtime::process_config().max_graph_ops)
    ctx.sync("graph size limit (LAZYJIT_MAX_GRAPH_OPS)", TraceContext::call_site());
}

}  // namespace

}  // namespace lazyjit::tracer
