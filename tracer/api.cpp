// The public API (lazyjit.h) and the registration of the device with PyTorch.
// Modes and op hooks live with step mode (step_mode.cpp).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <mutex>

#include "debug/trace.h"
#include "runtime/backend.h"
#include "runtime/runtime.h"
#include "tracer/device_ops.h"
#include "tracer/lazy_storage.h"
#include "tracer/lazyjit.h"
#include "tracer/pinned_memory.h"
#include "tracer/record_op.h"
#include "tracer/streams.h"
#include "tracer/trace_context.h"

namespace lazyjit {

namespace {

// One device; its streams and events are tracer/streams.h's.
struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType T = c10::DeviceType::PrivateUse1;
  c10::DeviceType type() const override { return T; }
  c10::Device exchangeDevice(c10::Device d) const override {
    tracer::check_device_index(d.index());
    return c10::Device(T, 0);
  }
  c10::Device getDevice() const override { return c10::Device(T, 0); }
  void setDevice(c10::Device d) const override { tracer::check_device_index(d.index()); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override { return tracer::current_stream(d); }
  c10::Stream getDefaultStream(c10::Device d) const override {
    tracer::check_device_index(d.index());
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(T, 0));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return tracer::new_stream(d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return tracer::new_stream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return tracer::exchange_stream(s); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex, const c10::EventFlag) const override {
    tracer::record_event(event, s);
  }
  void block(void* event, const c10::Stream& s) const override { tracer::block_on_event(event, s); }
  bool queryEvent(void* event) const override { return tracer::query_event(event); }
  void synchronizeEvent(void* event) const override { tracer::synchronize_event(event); }
  double elapsedTime(void* a, void* b, const c10::DeviceIndex) const override { return tracer::elapsed_ms(a, b); }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override { tracer::destroy_event(event); }
  bool queryStream(const c10::Stream& s) const override { return tracer::query_stream(s); }
  void synchronizeStream(const c10::Stream& s) const override { tracer::synchronize_stream(s); }
  void synchronizeDevice(const c10::DeviceIndex i) const override {
    tracer::check_device_index(i);
    tracer::synchronize_device();
  }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

struct Hooks final : at::PrivateUse1HooksInterface {
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  bool isAvailable() const override { return true; }
  bool isBuilt() const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  // Pinned host memory is ordinary host memory here (copies are synchronous), from
  // an allocator that remembers it, so is_pinned() holds (tracer/pinned_memory.h).
  bool isPinnedPtr(const void* data) const override { return tracer::is_pinned_ptr(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return tracer::pinned_allocator(); }
  // Random ops on lazyjit draw from the generator of where data lives
  // (device_ops.cpp): the CPU's, so a seeded program gives the CPU's numbers;
  // under the CUDA target the GPU's.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex i) const override {
    tracer::check_device_index(i);
    return runtime::backend().default_generator();
  }
  // torch.Generator(device="lazyjit") (diffusers' pipelines take one on their
  // device): a new generator of where data lives, like the default one above,
  // so a seeded one draws eager's numbers there.
  at::Generator getNewGenerator(c10::DeviceIndex i) const override {
    tracer::check_device_index(i);
    return runtime::backend().new_generator();
  }
  // UntypedStorage.resize_ (FSDP frees and refills parameters' memory so):
  // every tensor over the storage sees it (tracer/storage_ops.cpp).
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    std::lock_guard<std::recursive_mutex> lock(tracer::TraceContext::mutex());
    tracer::resize_storage_bytes(storage, newsize);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tracer::record_op>());
}

// `param.data = t` between the CPU and lazyjit (accelerate and diffusers'
// offloading move weights so), as between the CPU and CUDA: both are dense
// strided tensors, so one's metadata may be copied onto the other. ATen's own
// rule lists only its in-tree dense backends.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", [](const at::Tensor& self, const at::Tensor& from) {
    auto dense = [](const at::Tensor& t) {
      return t.layout() == c10::kStrided && !t.is_quantized() && !t.is_nested() &&
             (t.device().is_cpu() || t.device().type() == c10::DeviceType::PrivateUse1);
    };
    return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
           (dense(self) && dense(from));
  });
}

namespace tracer {
void ensure_autograd_device_queue();  // autograd_queue.cpp
}

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (c10::get_privateuse1_backend() != "lazyjit") c10::register_privateuse1_backend("lazyjit");
    c10::SetAllocator(c10::DeviceType::PrivateUse1, tracer::lazy_allocator());
    at::RegisterPrivateUse1HooksInterface(new Hooks());
    tracer::ensure_autograd_device_queue();
    // Structured ops have a composite kernel that would rewrite e.g. add.Tensor
    // into empty + add.out before the fallback sees it; claiming them keeps
    // functional ops functional in the graph. The ops every device implements
    // itself are claimed too.
    static auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                          __FILE__, __LINE__);
    auto& d = c10::Dispatcher::singleton();
    for (const c10::OperatorName& name : d.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) continue;
      auto op = d.findOp(name);
      if (!op) continue;
      // Composite kernels of ops that have a CPU kernel too (native_layer_norm's
      // would become batch_norm): the executor runs the CPU kernel instead.
      bool claim = op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
                   (op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
                    op->hasKernelForDispatchKey(c10::DispatchKey::CPU));
      static const char* own[] = {"aten::empty", "aten::empty_strided", "aten::copy_", "aten::_copy_from",
                                  "aten::_copy_from_and_resize", "aten::_local_scalar_dense", "aten::resize_",
                                  "aten::zero_", "aten::fill_",
                                  "aten::convolution", "aten::convolution_backward",
                                  // Functional ops whose only kernel is a composite
                                  // over their CPU .out kernel (abs -> empty + abs.out):
                                  // claimed, they are recorded as themselves and fuse.
                                  "aten::abs", "aten::logical_not", "aten::logical_and", "aten::logical_or",
                                  "aten::logical_xor", "aten::nan_to_num"};
      for (const char* o : own) claim |= name.name == o;
      if (!claim || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
      std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
      lib->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&tracer::record_op>());
    }
  });
}

namespace {
struct Init {
  Init() { init(); }
} init_on_load;
}  // namespace

c10::Device device() { return c10::Device(c10::DeviceType::PrivateUse1, 0); }

void sync() {
  tracer::TraceContext& ctx = tracer::TraceContext::get();
  // The caller's line names a sync in the log and in errors; finding it reads
  // Python's frame (a few hundred ns), so a sync with nothing recorded (a loop
  // that syncs after each torch.compile call on the device) skips it.
  ctx.sync("lazyjit.sync()", ctx.has_pending() ? tracer::TraceContext::call_site() : std::string());
  ctx.note_step_end();
}

debug::MetricsSnapshot metrics() { return debug::Metrics::get().snapshot(); }
void reset_metrics() { debug::Metrics::get().reset(); }
std::string metrics_report() { return debug::Metrics::get().report(); }
std::string target() { return runtime::process_config().target; }
std::string data_device_type() { return c10::DeviceTypeName(runtime::backend().data_device().type(), /*lower_case=*/true); }
bool data_on_host() { return runtime::backend().data_on_host(); }
at::Generator data_generator() { return runtime::backend().default_generator(); }
void clear_cache() { runtime::Runtime::get().clear_cache(); }
int64_t wait_for_compiles() { return runtime::Runtime::get().wait_for_compiles(); }
void stop_background_compiles() {
  // At exit: a runtime never started (a process that only imported lazyjit, or
  // one whose runtime could not start: LAZYJIT_TARGET=cuda without a GPU, its
  // error raised where lazyjit was first used) has nothing to stop, and is not
  // started now (its LAZYJIT_TRACE, LAZYJIT_CACHE_DIR, ... would be opened at exit).
  if (runtime::Runtime* rt = runtime::Runtime::if_started()) rt->stop_background_compiles();
}

namespace {
void mark(const at::Tensor& t, int64_t dim, uint8_t m, const char* what) {
  if (!t.defined() || !tracer::is_lazy(t))
    throw std::invalid_argument(std::string("lazyjit.") + what + ": expected a lazyjit tensor, got " +
                                (t.defined() ? t.device().str() : std::string("an undefined tensor")));
  int64_t n = t.dim();
  if (dim < -std::max<int64_t>(n, 1) || dim >= std::max<int64_t>(n, 1) || n == 0)
    throw std::invalid_argument(std::string("lazyjit.") + what + ": dim " + std::to_string(dim) +
                                " out of range for a tensor of " + std::to_string(n) + " dims");
  auto& s = tracer::storage_of(t);
  s.marks = static_cast<uint8_t>((s.marks & ~(tracer::LazyStorage::kMarkDynamic | tracer::LazyStorage::kMarkStatic)) | m);
}
}  // namespace

namespace {
thread_local int t_strict = 0;
thread_local std::vector<std::unique_ptr<runtime::NoCompileScope>> t_no_compile;
}  // namespace

void strict_enter() {
  ++t_strict;
  t_no_compile.push_back(std::make_unique<runtime::NoCompileScope>());
}
void strict_exit() {
  if (t_strict == 0) throw std::logic_error("lazyjit.strict: exit without a matching enter");
  --t_strict;
  t_no_compile.pop_back();
}
bool in_strict_region() { return t_strict > 0; }

void debug_nans(bool on) {
  sync();  // what was recorded before is checked as it was asked then
  runtime::Runtime::get().set_debug_nans(on);
}

void mark_dynamic(const at::Tensor& t, int64_t dim) { mark(t, dim, tracer::LazyStorage::kMarkDynamic, "mark_dynamic"); }
void mark_static(const at::Tensor& t, int64_t dim) { mark(t, dim, tracer::LazyStorage::kMarkStatic, "mark_static"); }
void set_interrupt_handlers(bool (*poll)(), void (*raise)()) { runtime::set_interrupt_handlers(poll, raise); }

void start_trace(const std::string& path) {
  runtime::Runtime::get();  // LAZYJIT_TRACE's trace, if any, starts first: this one follows it
  std::string error;
  if (!debug::start_trace(path, &error)) throw std::runtime_error("lazyjit.start_trace: " + error);
}

void stop_trace() { debug::stop_trace(); }

void set_call_site_provider(std::function<std::string()> p) {
  tracer::TraceContext::set_call_site_provider(std::move(p));
}

}  // namespace lazyjit
