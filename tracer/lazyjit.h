// lazyjit's public C++ API.
//
//   auto x = torch::randn({4, 4}).to(lazyjit::device());
//   auto y = (x * 2 + 1).relu();   // recorded, not run
//   std::cout << y.cpu();          // sync: compile (or hit the cache) and run
#pragma once
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "debug/metrics.h"

namespace lazyjit {

// Registers the `lazyjit` device with PyTorch (PrivateUse1). Idempotent; loading
// the library calls it.
void init();
c10::Device device();

// Runs everything the calling thread recorded (each thread records a graph of
// its own; another thread's tensors are computed when this thread uses them).
void sync();

// Lazy: ops are recorded and run at sync points. Step: each op runs at once,
// one at a time, through its eager CPU kernel, calling the op hooks.
enum class Mode { Lazy, Step };
void set_mode(Mode m);
void set_mode(const std::string& m);  // "lazy" or "step"
// Step mode on this thread only, while a region is open (they nest): entering
// runs what the thread recorded; mode() says Step inside. The global mode stays.
void step_region_enter();
void step_region_exit();
Mode mode();

struct OpEvent {
  std::string op;                   // schema name, e.g. "aten::add.Tensor"
  std::vector<c10::IValue> inputs;  // tensors as CPU tensors (copies)
  std::vector<c10::IValue> outputs; // tensors as CPU tensors
  std::string site;                 // the caller's file:line when known
};
using OpHook = std::function<void(const OpEvent&)>;

class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(uint64_t id) : id_(id) {}
  void remove();
  uint64_t id() const { return id_; }

 private:
  uint64_t id_ = 0;
};
// Hooks run in step mode, once per op, in program order.
HookHandle add_op_hook(OpHook hook);

debug::MetricsSnapshot metrics();
void reset_metrics();
std::string metrics_report();

// Empties the in-memory compile cache (tests use it to count compiles).
void clear_cache();

// How graphs that read `t`'s data compile their kernels (LAZYJIT_DYNAMIC, per
// tensor): mark_dynamic, shape-generic from the first compile (its sizes will
// change: no compile for the exact ones first); mark_static, for their exact
// sizes only. `dim` is checked against t (negative counts from the end) and
// names what the user expects to vary; the choice is per graph, not per dim.
// Throws std::invalid_argument unless t is a lazyjit tensor with that dim.
void mark_dynamic(const at::Tensor& t, int64_t dim);
// NaN/Inf checks (also LAZYJIT_DEBUG_NANS=1): each sync checks what it computed
// and, when a NaN or Inf appears, raises NonFiniteError naming the op that
// first made it, the line that recorded it, and its inputs' statistics (Python:
// RuntimeError, as any error a sync raises through torch). The tensors keep the
// values computed.
void debug_nans(bool on);
struct NonFiniteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Strict regions, for hot loops that must stay compiled: while one is open on
// this thread, an implicit sync (anything but lazyjit::sync()), an op run
// eagerly (a fallback) or a compile raises StrictError naming the op or reason
// and the user's line, before anything runs; nothing is lost. They nest.
struct StrictError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void strict_enter();
void strict_exit();
bool in_strict_region();
void mark_static(const at::Tensor& t, int64_t dim);

// A trace you can look at (also LAZYJIT_TRACE=<file.json>): Chrome trace-event
// JSON for Perfetto (ui.perfetto.dev) or chrome://tracing, with what each
// thread did (record, cache key, lookup hit or miss and why, compile per
// program and per kernel, execute per step, each sync with its reason and call
// site). start_trace creates `path` now (std::runtime_error when it cannot be
// written; a trace already running is written out first); stop_trace writes it
// and stops. A trace still running at exit is written then.
void start_trace(const std::string& path);
void stop_trace();

// Where the current op was called from, for sync and fallback accounting. The
// Python module installs one that reads the Python stack.
void set_call_site_provider(std::function<std::string()> provider);

// Ctrl-C during a long compile: `poll` says whether the user asked to stop
// (called every ~10 ms while compiling; must not throw); `raise` throws the
// exception the caller should see (may be null: a runtime_error is thrown).
// The compile stops promptly and the pending tensors stay pending.
void set_interrupt_handlers(bool (*poll)(), void (*raise)());

}  // namespace lazyjit
