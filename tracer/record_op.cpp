#include "tracer/record_op.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>

#include <optional>

#include "bridge/aten_ir.h"
#include "debug/metrics.h"
#include "debug/notice.h"
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

// PyTorch's rule, as on CUDA: a lazyjit op accepts CPU tensors only when 0-d,
// and tensors of no other device (copies are the device's own ops, earlier).
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
      if (t.defined() && !t.device().is_cpu() && !t.device().is_meta() && !is_lazy(t))
        TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, lazyjit:0 and ",
                    t.device(), "!");
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

bool unnamed_dtype(const at::Tensor& t) { return bridge::from_aten(t.scalar_type()) == ir::DType::Other; }

// What recording must know about an op's lazyjit tensor arguments.
struct ArgKinds {
  bool sparse = false;       // a sparse layout: the op runs through its CPU kernel
  bool math_bits = false;    // a conjugate or negative view (is_conj(), is_neg())
  bool reinterpret = false;  // a dtype-reinterpreting view (device_ops.h)
  bool unnamed = false;      // a dtype the graph has no name for (uint16/32/64, ...)
};

ArgKinds arg_kinds(const Stack& args) {
  ArgKinds k;
  for (const IValue& v : args)
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined() || !is_lazy(t)) return;
      if (is_sparse_layout(t)) {
        k.sparse = true;
        return;
      }
      k.math_bits |= has_math_bits(t);
      k.unnamed |= unnamed_dtype(t);
      k.reinterpret |= reinterprets(t);
    });
  return k;
}

// Replaces the conjugate and negative views among the arguments an op reads by
// their values (recorded conj_physical / neg): the graph reads stored elements.
// False when the op writes into one (the caller runs it through the CPU kernel).
bool resolve_math_bits_args(const c10::FunctionSchema& schema, Stack* args, Stack* stack) {
  size_t n = args->size();
  for (size_t i = 0; i < n; ++i) {
    bool bits = false;
    for_each_tensor((*args)[i], [&](const at::Tensor& t) { bits |= is_lazy(t) && has_math_bits(t); });
    if (!bits) continue;
    const auto* ai = schema.arguments()[i].alias_info();
    if (ai && ai->isWrite()) return false;
  }
  for (size_t i = 0; i < n; ++i) {
    bool bits = false;
    for_each_tensor((*args)[i], [&](const at::Tensor& t) { bits |= is_lazy(t) && has_math_bits(t); });
    if (!bits) continue;
    IValue r = map_tensors((*args)[i], [](const at::Tensor& t) { return is_lazy(t) ? resolve_math_bits(t) : t; });
    (*args)[i] = r;
    (*stack)[stack->size() - n + i] = r;
  }
  return true;
}

// Around compiled programs (TraceContext::around_programs), the ops that run at
// once rather than being recorded: every lazyjit tensor they touch is on hand
// (materialized, and no graph still to run writes it) and small. Large ones are
// still recorded, so they fuse as before; views stay views; draws keep their
// trace-time path; nothing runs at once inside a strict region or a capture.
// Of the device's own ops only a copy between two lazyjit tensors (.to(dtype),
// clone's decomposition) does.
constexpr int64_t kAtOnceMaxElements = int64_t{1} << 18;

bool at_once(const OpInfo& info, const Stack& args) {
  if (info.view || info.draws) return false;
  // A capture is a strict region too (capture.cpp).
  if (!TraceContext::get().around_programs() || in_strict_region() || lazyjit::mode() == Mode::Step) return false;
  if (info.special && !(info.name == "aten::copy_" && is_lazy(args[0].toTensor()) && args[1].isTensor() &&
                        is_lazy(args[1].toTensor())))
    return false;
  bool ok = true;
  for (const IValue& v : args)
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!ok || !t.defined() || !is_lazy(t)) return;
      // Readable now; one without data is uninitialized (from empty(): an out= argument).
      const LazyStorage& s = storage_of(t);
      ok = t.numel() <= kAtOnceMaxElements && s.numel <= kAtOnceMaxElements && TraceContext::readable_now(s);
    });
  return ok;
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

  ArgKinds kinds = arg_kinds(args);
  if (!kinds.sparse && at_once(info, args)) {
    check_args(info, op.schema(), args);
    return run_at_once(op, stack);
  }
  debug::Metrics::get().add(debug::Counter::OpsTraced);
  // Sparse tensors: lazyjit's sparse dispatch keys send every op without a
  // kernel of its own here (device_ops.cpp); their CPU kernels run them.
  if (kinds.sparse) return run_eager(op, stack, "sparse tensors");
  // Copies between devices are allowed in the device's own ops, so they come
  // before the argument checks.
  if (info.special && run_special_op(info.name, args, stack)) return;
  if (info.index) move_cpu_indices(stack, &args);
  check_args(info, op.schema(), args);
  if (lazyjit::mode() == Mode::Step) return run_eager(op, stack, "step mode");
  if (!info.view) {
    // Views keep these (record_view); other ops read values.
    if (kinds.math_bits && !resolve_math_bits_args(op.schema(), &args, stack))
      return run_eager(op, stack, "it writes into a conjugate or negative view");
    // The graph has no bitcast, and no other dtypes: the CPU kernel reads and
    // writes the elements as eager's does.
    if (kinds.reinterpret) return run_eager(op, stack, "a dtype-reinterpreting view");
    if (kinds.unnamed) return run_eager(op, stack, "a dtype lazyjit's graphs do not carry");
  }
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
  for (const at::Tensor& m : meta->outs) {
    if (is_sparse_layout(m)) return run_eager(op, stack, "sparse tensors");
    if (m.defined() && unnamed_dtype(m) && !info.view)
      return run_eager(op, stack, "a dtype lazyjit's graphs do not carry");
  }
  if (info.view) {
    if (!record_view(op, args, *meta, stack)) run_eager(op, stack, "view op with an unexpected result");
    return;
  }
  stack->erase(stack->end() - nargs, stack->end());
  TraceContext& ctx = TraceContext::get();
  const auto first = static_cast<uint32_t>(ctx.graph().nodes().size());
  if (!record_ir_nodes(info, args, *meta, stack)) record_aten(op, info, args, meta->args, meta->rets, stack);
  if (TraceContext::wants_op_origins()) ctx.note_op_nodes(first, info.name);
  // A runaway graph (a loop that never syncs) is cut here and run, so compile
  // time and memory stay bounded; the cut is counted with its reason. (A
  // failing step of it already names its own op.)
  if (static_cast<int64_t>(ctx.graph().nodes().size()) >= runtime::process_config().max_graph_ops) {
    const std::string site = TraceContext::call_site();
    debug::notice("graph cut @ " + site,
                  "a graph reached LAZYJIT_MAX_GRAPH_OPS (" +
                      std::to_string(runtime::process_config().max_graph_ops) + " nodes) at " +
                      (site.empty() ? std::string("(unknown site)") : site) +
                      " and was cut and run there: the step runs as more than one program (raise the limit, or "
                      "sync once per step); counted in lazyjit.metrics()['sync_reasons']");
    ctx.sync("graph size limit (LAZYJIT_MAX_GRAPH_OPS)", site);
  }
}

}  // namespace

}  // namespace lazyjit::tracer
