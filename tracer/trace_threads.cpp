// The trace contexts of the process, one per recording thread, the choice of a
// context for an op, and what the contexts share: the lock, the call site
// provider, errors waiting for the thread that recorded the failing op.
//
// A thread gets a context at its first op. When it exits, its context is
// detached but kept (storages point at it, and its pending values may still be
// read by other threads, which sync it); a new thread reuses a detached context
// once nothing it recorded is pending. Contexts are never freed.
//
// Ops that autograd runs for backward() (on its device thread, while the thread
// that called backward() waits) record into the context of the pending storages
// they read, so a training step stays one graph; without any, into the context
// of that thread's previous op, or the first context made.
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/graph_task.h>

#include <unordered_set>

#include "tracer/call_site.h"
#include "tracer/ivalue_tensors.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

struct ContextRegistry {
  std::recursive_mutex mu;
  std::vector<TraceContext*> all;
  TraceContext* first = nullptr;
  std::unordered_set<std::thread::id> owners;  // live threads with a context of their own
  std::unordered_map<std::thread::id, std::exception_ptr> deferred;
  std::function<std::string()> site_provider;

  static ContextRegistry& get() {
    static auto* r = new ContextRegistry();  // outlives static tensors
    return *r;
  }
  static void detach(TraceContext* c) { c->attached_ = false; }

  // A context for the calling thread: a detached one whose pending values are
  // all gone, or a new one. Hold `mu`.
  TraceContext* attach() {
    TraceContext* c = nullptr;
    for (TraceContext* d : all)
      if (!d->attached_ && d->touched_.empty()) {
        c = d;
        c->reset();
        break;
      }
    if (!c) {
      c = new TraceContext();
      all.push_back(c);
      if (!first) first = c;
    }
    c->attached_ = true;
    owners.insert(std::this_thread::get_id());
    return c;
  }
};

namespace {

struct ThreadSlot {
  TraceContext* own = nullptr;
  TraceContext* current = nullptr;  // the context of the op being recorded
  TraceContext* last = nullptr;     // the context of the previous op run for autograd
  ~ThreadSlot() {
    if (!own) return;
    auto& r = ContextRegistry::get();
    std::lock_guard<std::recursive_mutex> lock(r.mu);
    ContextRegistry::detach(own);
    r.owners.erase(std::this_thread::get_id());
    r.deferred.erase(std::this_thread::get_id());
    own = nullptr;
  }
};
thread_local ThreadSlot slot;

TraceContext& own_context() {
  if (!slot.own) {
    auto& r = ContextRegistry::get();
    std::lock_guard<std::recursive_mutex> lock(r.mu);
    slot.own = r.attach();
  }
  return *slot.own;
}

// True while the calling thread runs a backward pass for autograd.
bool in_backward() { return torch::autograd::get_current_graph_task_id() != -1; }

// The context an op run for autograd records into: that of a storage it reads
// that was computed there (a gradient, an activation), else of one read there,
// else of the last context that held one (the gradient backward() starts from,
// which the calling thread filled).
TraceContext& follow(const c10::IValue* args, size_t n) {
  TraceContext* found = nullptr;
  TraceContext* reader = nullptr;
  TraceContext* holder = nullptr;
  for (size_t i = 0; i < n && !found; ++i)
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      if (found || !is_lazy(t)) return;
      const LazyStorage& s = storage_of(t);
      TraceContext* o = TraceContext::pending_owner(s);
      if (o && !o->reads_only(s)) found = o;
      else if (o && !reader) reader = o;
      else if (!o && !holder) holder = s.owner;
    });
  if (!found) found = reader ? reader : holder;
  if (!found) found = slot.last ? slot.last : ContextRegistry::get().first;
  if (!found) return own_context();
  slot.last = found;
  return *found;
}

}  // namespace

TraceContext& TraceContext::get() {
  if (slot.current) return *slot.current;
  if (slot.own || !in_backward()) return own_context();
  return follow(nullptr, 0);
}

std::recursive_mutex& TraceContext::mutex() { return ContextRegistry::get().mu; }

const std::vector<TraceContext*>& TraceContext::contexts() { return ContextRegistry::get().all; }

TraceContext::OpScope::OpScope(const c10::IValue* args, size_t n) : outer_(slot.current == nullptr) {
  if (!outer_) return;
  slot.current = in_backward() ? &follow(args, n) : &own_context();
}

TraceContext::OpScope::~OpScope() {
  if (outer_) slot.current = nullptr;
}

void TraceContext::forget(LazyStorage* s) {
  auto& r = ContextRegistry::get();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  if (s->owner) s->owner->untouch(*s);
  for (TraceContext* c : r.all) {
    for (auto& o : c->input_owner_)
      if (o == s) o = nullptr;
    c->shared_.erase(s);
  }
}

std::string TraceContext::call_site() {
  auto& p = ContextRegistry::get().site_provider;
  return p ? p() : cpp_call_site();
}

void TraceContext::set_call_site_provider(std::function<std::string()> p) {
  auto& r = ContextRegistry::get();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  r.site_provider = std::move(p);
}

void TraceContext::defer(std::thread::id thread, std::exception_ptr error) {
  auto& r = ContextRegistry::get();
  if (r.owners.count(thread)) r.deferred.emplace(thread, std::move(error));
}

void TraceContext::raise_deferred() {
  auto& d = ContextRegistry::get().deferred;
  if (d.empty()) return;
  auto it = d.find(std::this_thread::get_id());
  if (it == d.end()) return;
  std::exception_ptr e = std::move(it->second);
  d.erase(it);
  std::rethrow_exception(e);
}

}  // namespace lazyjit::tracer
