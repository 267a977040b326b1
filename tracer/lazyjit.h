// lazyjit's public C++ API.
//
//   auto x = torch::randn({4, 4}).to(lazyjit::device());
//   auto y = (x * 2 + 1).relu();   // recorded, not run
//   std::cout << y.cpu();          // sync: compile (or hit the cache) and run
#pragma once
#include <ATen/core/Generator.h>
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

// What kernels are compiled for: "cpu", "cuda" or "cuda-sim" (LAZYJIT_TARGET,
// read once, before the first op; docs/switches.md). Reading it starts nothing.
std::string target();
// Where programs' data lives, as the target's backend says (runtime/backend.h):
// its device type ("cpu", "cuda"), whether it is host memory, and the default
// generator there (random ops on lazyjit draw from it). Each makes the backend.
std::string data_device_type();
bool data_on_host();
at::Generator data_generator();

struct OpEvent {
  std::string op;                   // schema name, e.g. "aten::add.Tensor"
  std::vector<c10::IValue> inputs;  // tensors as CPU tensors (copies; CUDA tensors under LAZYJIT_TARGET=cuda)
  std::vector<c10::IValue> outputs; // tensors as CPU tensors (CUDA tensors under LAZYJIT_TARGET=cuda)
  std::string site;                 // the caller's file:line when known
  // Lazy events (add_op_hook(hook, true)): one per op recorded into a compiled
  // graph, after the graph ran, in recording order. Their inputs are what the op
  // read from outside itself (other ops' results, graph inputs, scalars), their
  // outputs what it made that others read or the sync returned, as the compiled
  // code computed them. View ops make no event (they record no node).
  bool lazy = false;
  // Lazy: the op's place in its graph, as the graph node number of its first
  // node (the "op #N" that NaN, check and recompile reports give); step mode: -1.
  int64_t index = -1;
  // Step mode: the eager kernel's wall time. Lazy: this op's share of the steps
  // that computed it (a fused kernel's time split evenly among its ops).
  double duration_ms = 0;
  std::string kernel;               // lazy: those steps, "fused_2 [mul, add, exp]" or "aten::mm"
  double kernel_ms = 0;             // lazy: their whole time
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
// Hooks run in step mode, once per op, in program order. With `lazy` also for
// every op of every compiled graph, after it runs (OpEvent::lazy): the graph is
// then compiled with every op's result stored (slower; a debugging tool).
HookHandle add_op_hook(OpHook hook, bool lazy = false);

debug::MetricsSnapshot metrics();
void reset_metrics();
std::string metrics_report();

// Empties the in-memory compile cache (tests use it to count compiles).
void clear_cache();
// Waits until no program is compiling in the background (LAZYJIT_BACKGROUND_COMPILE):
// each sync after it that needs one of them runs compiled code. Returns how
// many it waited for. Benchmarks call it after their warm-up.
int64_t wait_for_compiles();
// Drops the queued background compiles and waits for the running one; from then
// on a graph that misses every cache runs op by op. For exit handlers (the
// Python module calls it from Python's atexit, before anything is torn down).
void stop_background_compiles();

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

// Compiled vs eager (also LAZYJIT_CHECK=1): each sync compiles its graph with
// every op's result stored, runs it, and re-runs every op that generated code
// computed through ATen's eager kernel on the same operands. The first op whose
// results differ beyond tolerance raises CheckError naming the op, the line
// that recorded it, the fused kernel that computed it and the errors, and a
// standalone repro is written under `repro_dir` (default ./lazyjit_repro; runs
// with `python -m lazyjit.repro DIR` or `lazyjit-repro DIR`). The tensors keep
// the values computed.
void check_graphs(bool on, const std::string& repro_dir = {});
struct CheckError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Runs a repro directory's check: its report, or "" when compiled and eager
// agree now. Throws std::runtime_error when the directory is unreadable or this
// process's switches differ from the repro's env.txt (which says how to run it).
std::string run_repro(const std::string& dir);

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
