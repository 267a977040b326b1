#include "tracer/step_mode.h"

#include "debug/notice.h"

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <map>
#include <mutex>

#include "debug/metrics.h"
#include "runtime/runtime.h"
#include "tracer/device_ops.h"
#include "tracer/ivalue_tensors.h"
#include "tracer/lazyjit.h"
#include "tracer/op_info.h"
#include "tracer/trace_context.h"

namespace lazyjit {

namespace {

// Read at first use, not when the library loads: `import torch` loads lazyjit
// (python/lazyjit_autoload.py), and a program may set LAZYJIT_MODE after that.
std::atomic<Mode>& g_mode() {
  static std::atomic<Mode> m{runtime::process_config().step_mode ? Mode::Step : Mode::Lazy};
  return m;
}
thread_local int t_step_regions = 0;

struct Hook {
  OpHook fn;
  bool lazy;
};
std::mutex hooks_mu;
std::map<uint64_t, Hook>& hooks() {
  static auto* h = new std::map<uint64_t, Hook>();
  return *h;
}
std::atomic<uint64_t> next_hook{1};
std::atomic<bool> any_hooks{false};
std::atomic<bool> any_lazy_hooks{false};

bool has_op_hooks() { return any_hooks; }

// A copy of the registry, so a hook may add or remove hooks.
std::vector<OpHook> hooks_copy(bool lazy_only) {
  std::vector<OpHook> copy;
  std::lock_guard<std::mutex> lock(hooks_mu);
  for (auto& [id, h] : hooks())
    if (!lazy_only || h.lazy) copy.push_back(h.fn);
  return copy;
}

void call_op_hooks(const OpEvent& e) {
  for (auto& h : hooks_copy(false)) h(e);
}

void update_flags() {
  any_hooks = !hooks().empty();
  bool lazy = false;
  for (auto& [id, h] : hooks()) lazy |= h.lazy;
  any_lazy_hooks = lazy;
}

}  // namespace

void set_mode(Mode m) {
  if (m == Mode::Step) sync();  // step mode starts from materialized tensors
  g_mode() = m;
}

void set_mode(const std::string& m) {
  if (m == "lazy") set_mode(Mode::Lazy);
  else if (m == "step") set_mode(Mode::Step);
  else TORCH_CHECK(false, "lazyjit: unknown mode '", m, "' (expected \"lazy\" or \"step\")");
}

Mode mode() { return t_step_regions > 0 ? Mode::Step : g_mode().load(); }

void step_region_enter() {
  sync();  // step mode starts from materialized tensors
  ++t_step_regions;
}

void step_region_exit() {
  if (t_step_regions == 0) throw std::logic_error("lazyjit.step_mode: exit without a matching enter");
  --t_step_regions;
}

void HookHandle::remove() {
  std::lock_guard<std::mutex> lock(hooks_mu);
  hooks().erase(id_);
  update_flags();
}

HookHandle add_op_hook(OpHook hook, bool lazy) {
  std::lock_guard<std::mutex> lock(hooks_mu);
  uint64_t id = next_hook++;
  hooks()[id] = {std::move(hook), lazy};
  update_flags();
  return HookHandle(id);
}

namespace tracer {

bool has_lazy_op_hooks() { return any_lazy_hooks; }

void call_lazy_op_hooks(const std::vector<OpEvent>& events) {
  std::vector<OpHook> copy = hooks_copy(true);
  for (const OpEvent& e : events)
    for (auto& h : copy) h(e);
}

using c10::IValue;
using torch::jit::Stack;

namespace {
// Runs `op`'s kernel where data lives on the arguments' materialized elements
// (nothing they read may be pending) and wraps the results; with `hook_event`,
// fills it and calls the op hooks.
void run_kernel(const c10::OperatorHandle& op, Stack* stack, const char* reason, OpEvent* hook_event,
                bool own_memory = false);
}  // namespace

void run_eager(const c10::OperatorHandle& op, Stack* stack, const char* reason) {
  TraceContext& ctx = TraceContext::get();
  std::string name = full_name(op);
  bool step = lazyjit::mode() == Mode::Step;
  std::string site = ctx.call_site();
  if (!step && in_strict_region())
    throw StrictError("lazyjit.strict: " + name + " would run eagerly in a strict region (" + reason + ")" +
                      (site.empty() ? std::string() : " at " + site) + " (nothing ran)");
  if (!step) {
    debug::Metrics::get().fallback(name, reason, site);
    // Once per op and call site (LAZYJIT_LOG=fallbacks: every time; none: never).
    debug::notice("fallback " + name + " @ " + site,
                  name + " ran on the CPU (" + reason + ")" + (site.empty() ? std::string() : " at " + site) +
                      "; counted in lazyjit.metrics()['fallbacks']",
                  /*every=*/true);
  }
  if (ctx.has_pending()) ctx.sync(std::string("eager op ") + name + ": " + reason, site);
  OpEvent event;
  bool hooked = step && has_op_hooks();
  if (hooked) {
    event.op = name;
    event.site = site;
  }
  run_kernel(op, stack, reason, hooked ? &event : nullptr);
  if (step) debug::Metrics::get().add(debug::Counter::StepOps);
}

void run_at_once(const c10::OperatorHandle& op, Stack* stack) {
  run_kernel(op, stack, "run at once", nullptr, /*own_memory=*/true);
  debug::Metrics::get().add(debug::Counter::OpsAtOnce);
}

namespace {

void run_kernel(const c10::OperatorHandle& op, Stack* stack, const char* reason, OpEvent* hook_event,
                bool own_memory) {
  TraceContext& ctx = TraceContext::get();
  const auto& schema = op.schema();
  Stack args = *stack;
  // The kernel writes these arguments' elements in place.
  for (size_t i = 0; i < schema.arguments().size() && i < args.size(); ++i) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (ai && ai->isWrite())
      for_each_tensor(args[i], [&](const at::Tensor& t) {
        if (!is_lazy(t)) return;
        TORCH_CHECK(!is_sparse_layout(t), "lazyjit: ", full_name(op), " writes into a sparse lazyjit tensor (",
                    t.layout(), "), which lazyjit does not support");
        ctx.prepare_write(t);
        // Run at once, the write never lands in memory someone else holds (a
        // data view handed out): the storage takes a copy first, as a program
        // computes in place only into memory nothing else holds.
        LazyStorage& s = storage_of(t);
        if (own_memory && s.data.defined() && !s.shm.defined() && s.data.storage().use_count() > 1)
          s.data = s.data.clone();
      });
  }
  // The kernel of where data lives (data_device(): the CPU, or the GPU under
  // the CUDA target) sees what eager's would: the elements, conj/neg bits
  // included; sparse tensors are copied out of lazyjit's storages.
  auto to_cpu = [&](const at::Tensor& t) -> at::Tensor {
    if (!is_lazy(t)) return t;
    if (is_sparse_layout(t)) return sparse_to_cpu(t);
    std::optional<at::Tensor> v = TraceContext::on_hand_view(t);
    return with_math_bits(v ? *v : ctx.cpu_view(t, reason), t);
  };
  Stack cpu;
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& v = args[i];
    if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      cpu.push_back(data_device());
      continue;
    }
    // An out= tensor over an uninitialized storage (from empty()) gets new,
    // unfilled data: the kernel writes every element it keeps.
    const auto* ai = i < schema.arguments().size() ? schema.arguments()[i].alias_info() : nullptr;
    if (ai && ai->isWrite() && v.isTensor() && is_lazy(v.toTensor()) && !is_sparse_layout(v.toTensor())) {
      const at::Tensor& t = v.toTensor();
      LazyStorage& s = storage_of(t);
      if (!s.data.defined() && !s.lost && !TraceContext::pending_owner(s) && ctx.is_fresh(t)) {
        s.dtype = t.scalar_type();
        s.numel = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
        s.data = at::empty({s.numel}, on_device(s.dtype));
      }
    }
    cpu.push_back(map_tensors(v, to_cpu));
  }
  bool hooked = hook_event != nullptr;
  if (hooked)
    for (const IValue& v : cpu) hook_event->inputs.push_back(v.isTensor() ? IValue(v.toTensor().clone()) : v);
  Stack in_cpu = cpu;
  std::chrono::steady_clock::time_point t0;
  if (hooked) t0 = std::chrono::steady_clock::now();
  op.callBoxed(&cpu);
  if (hooked) hook_event->duration_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // out= arguments the kernel resized got new memory: the lazyjit tensor
  // follows, as it would on any device.
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (!ai || !ai->isWrite() || !args[i].isTensor() || !is_lazy(args[i].toTensor())) continue;
    const at::Tensor& lazy = args[i].toTensor();
    const at::Tensor& now = in_cpu[i].toTensor();
    if (now.sizes() == lazy.sizes() && now.is_alias_of(storage_of(lazy).data)) continue;
    at::Tensor d = now.is_non_overlapping_and_dense() ? now : now.contiguous();
    lazy.unsafeGetTensorImpl()->set_storage_keep_dtype(make_storage(d.numel(), d.scalar_type()));
    lazy.unsafeGetTensorImpl()->set_sizes_and_strides(d.sizes(), d.strides(), 0);
    ctx.assign_data(lazy, d);
  }
  stack->clear();
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    IValue& res = cpu[r];
    int a = aliased_arg(schema, r);
    auto wrap = [&](const at::Tensor& t, int arg) -> at::Tensor {
      if (!t.defined()) return t;
      if (is_sparse_layout(t)) return sparse_to_lazy(t);
      if (arg >= 0 && args[arg].isTensor() && is_lazy(args[arg].toTensor()) &&
          !is_sparse_layout(args[arg].toTensor())) {
        const at::Tensor& base = args[arg].toTensor();
        if (schema.returns()[r].alias_info()->isWrite()) return base;
        const at::Tensor& data = storage_of(base).data;
        if (t.is_alias_of(data)) {
          // A view, of the base's dtype or another (view_as_real): the lazyjit
          // tensor's offset counts its own elements from the storage's start.
          int64_t bytes = t.storage_offset() * static_cast<int64_t>(t.element_size()) -
                          data.storage_offset() * static_cast<int64_t>(data.element_size());
          at::Tensor v = make_tensor(base.storage(), t.scalar_type(), t.sizes(), t.strides(),
                                     bytes / static_cast<int64_t>(t.element_size()));
          return with_math_bits(v, t);
        }
      }
      // A fresh result owns its memory; one that aliases an input is copied
      // (as is one with conj/neg bits, resolved).
      at::Tensor u = has_math_bits(t) ? t.resolve_conj().resolve_neg() : t;
      bool aliases_input = false;
      for (const IValue& v : in_cpu)
        if (v.isTensor() && v.toTensor().defined() && !is_sparse_layout(v.toTensor()) && u.is_alias_of(v.toTensor()))
          aliases_input = true;
      at::Tensor d = u.is_non_overlapping_and_dense() && !aliases_input ? u : u.clone(at::MemoryFormat::Contiguous);
      at::Tensor out = make_tensor(make_storage(d.numel(), d.scalar_type()), d.scalar_type(), d.sizes(), d.strides(), 0);
      ctx.assign_data(out, d);
      return out;
    };
    stack->push_back(map_tensors(res, [&](const at::Tensor& t) { return wrap(t, a); }));
  }
  if (hooked) {
    for (const IValue& v : *stack)
      hook_event->outputs.push_back(v.isTensor() && is_lazy(v.toTensor()) && !is_sparse_layout(v.toTensor())
                                  ? IValue(with_math_bits(ctx.cpu_view(v.toTensor(), "hook"), v.toTensor()).clone())
                                  : v);
    call_op_hooks(*hook_event);
  }
}

}  // namespace

bool run_special_op(const std::string& name, const Stack& args, Stack* stack) {
  if (lazyjit::mode() != Mode::Step || !has_op_hooks()) return special_op(name, stack);
  TraceContext& ctx = TraceContext::get();
  auto cpu_copy = [&](const IValue& v) -> IValue {
    if (!v.isTensor() || !v.toTensor().defined()) return v;
    const at::Tensor& t = v.toTensor();
    return is_lazy(t) ? ctx.cpu_view(t, "hook").clone() : t.clone();
  };
  OpEvent event;
  event.op = name;
  event.site = ctx.call_site();
  for (const IValue& v : args) event.inputs.push_back(cpu_copy(v));
  if (!special_op(name, stack)) return false;  // copies between devices are allowed here
  for (const IValue& v : *stack) event.outputs.push_back(cpu_copy(v));
  call_op_hooks(event);
  return true;
}

}  // namespace tracer
}  // namespace lazyjit
