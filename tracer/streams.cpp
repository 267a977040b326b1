#include "tracer/streams.h"

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <iterator>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "env/env.h"
#include "tracer/lazy_storage.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

namespace {

using Clock = std::chrono::steady_clock;
constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;

std::atomic<c10::StreamId> last_stream_id{0};     // ids handed out; 0 is the default stream
thread_local c10::StreamId t_current_stream = 0;  // as CUDA's current stream, per thread

void check_stream(const c10::Stream& s) {
  TORCH_CHECK(s.device_type() == kType, "lazyjit: expected a lazyjit stream, got one of ", s.device_type());
  check_device_index(s.device_index());
  TORCH_CHECK(s.id() >= 0 && s.id() <= last_stream_id.load(), "lazyjit: no stream with id ", s.id(),
              " (streams come from torch.lazyjit.Stream() or torch.Stream(device=\"lazyjit\"))");
}

// A recorded event. `point` names the graph whose run reaches it as a pending
// storage would (owner and epoch; TraceContext::pending_owner says whether that
// graph is still pending), without being one of the graph's storages.
struct Event {
  LazyStorage point{0, at::kByte, 0};
  std::optional<Clock::time_point> reached;  // when the point was reached, when known
};

// Events whose point was pending when last looked at. Guarded by
// TraceContext::mutex(), like everything the recording touches.
std::unordered_set<Event*>& pending_events() {
  static auto* s = new std::unordered_set<Event*>();  // outlives static destructors
  return *s;
}

bool reached(const Event& e) { return TraceContext::pending_owner(e.point) == nullptr; }

// Runs `ctx`'s pending work (an explicit sync, as lazyjit.sync() is for strict
// regions) and times the events it reaches. `site` is the caller's line, found
// before taking the lock (finding it takes the GIL).
void timed_sync(TraceContext& ctx, const std::string& site) {
  std::vector<Event*> waiting;
  for (Event* e : pending_events())
    if (e->point.owner == &ctx && !reached(*e)) waiting.push_back(e);
  ctx.sync("lazyjit.sync()", site);
  const Clock::time_point now = Clock::now();
  for (Event* e : waiting) e->reached = now;
  // The others reached (at a sync before this one: untimed) are looked at no more.
  for (auto it = pending_events().begin(); it != pending_events().end();)
    it = reached(**it) ? pending_events().erase(it) : std::next(it);
}

}  // namespace

int launcher_local_rank() {
  const std::string v = env::get("LOCAL_RANK");
  if (v.empty()) return -1;
  char* end = nullptr;
  const long r = std::strtol(v.c_str(), &end, 10);
  return (*end == '\0' && r > 0 && r < 128) ? static_cast<int>(r) : -1;
}

void check_device_index(int64_t index) {
  if (index == 0 || index == -1) return;
  const int local = launcher_local_rank();
  TORCH_CHECK(index == local, "lazyjit: invalid device ordinal ", index,
              ": the lazyjit device has one device, index 0",
              local > 0 ? " (or " + std::to_string(local) + ", this process's LOCAL_RANK)" : std::string());
}

c10::Stream current_stream(c10::Device device) {
  check_device_index(device.index());
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, 0), t_current_stream);
}

c10::Stream exchange_stream(c10::Stream stream) {
  check_stream(stream);
  c10::Stream previous = current_stream(stream.device());
  t_current_stream = stream.id();
  return previous;
}

c10::Stream new_stream(c10::Device device) {
  check_device_index(device.index());
  // Priorities are accepted and have no effect: there is one queue.
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, 0), ++last_stream_id);
}

void record_event(void** event, const c10::Stream& stream) {
  check_stream(stream);
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  Event* e = *event ? static_cast<Event*>(*event) : new Event();
  *event = e;
  e->reached.reset();
  e->point.owner = nullptr;
  e->point.epoch = 0;
  TraceContext& ctx = TraceContext::get();
  if (!ctx.has_pending()) {
    // Everything recorded before it has run: the point is reached now.
    e->reached = Clock::now();
    pending_events().erase(e);
    return;
  }
  ctx.mark_pending(e->point);
  pending_events().insert(e);
}

void block_on_event(void* event, const c10::Stream& stream) {
  check_stream(stream);
  // One queue: work recorded after this call runs after the event's point in
  // any case (a later graph runs after the earlier one; within a graph, in the
  // order recorded). With more than one queue this would order them.
  (void)event;
}

bool query_event(void* event) {
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  return reached(*static_cast<Event*>(event));
}

void synchronize_event(void* event) {
  const std::string site = TraceContext::call_site();
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  auto* e = static_cast<Event*>(event);
  if (!reached(*e)) timed_sync(*e->point.owner, site);
}

double elapsed_ms(void* start, void* end) {
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  auto* a = static_cast<Event*>(start);
  auto* b = static_cast<Event*>(end);
  for (Event* e : {a, b}) {
    TORCH_CHECK(e->reached, "lazyjit: elapsed_time: the work before the ", e == a ? "start" : "end",
                " event ran at a sync that did not note its time (.item(), .cpu(), printing or lazyjit.sync()); "
                "call event.synchronize(), stream.synchronize() or torch.lazyjit.synchronize() to run it "
                "timed");
  }
  return std::chrono::duration<double, std::milli>(*b->reached - *a->reached).count();
}

void destroy_event(void* event) noexcept {
  if (!event) return;
  auto* e = static_cast<Event*>(event);
  {
    std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
    pending_events().erase(e);
  }
  delete e;
}

bool query_stream(const c10::Stream& stream) {
  check_stream(stream);
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  // Every stream's work is the recorded work (one queue).
  return !TraceContext::get().has_pending();
}

void record_stream(const c10::Stream& stream) {
  // One queue: a storage is never handed out again while work recorded on
  // another stream may still read it (the allocator's recordStream does
  // nothing), so there is nothing to record; the stream is checked as CUDA
  // checks it.
  check_stream(stream);
}

void synchronize_stream(const c10::Stream& stream) {
  check_stream(stream);
  synchronize_device();
}

void synchronize_device() {
  const std::string site = TraceContext::call_site();
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  timed_sync(TraceContext::get(), site);
}

}  // namespace lazyjit::tracer

// Tensor.record_stream(s) (code written for CUDA streams calls it).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", [](at::Tensor&, c10::Stream s) { lazyjit::tracer::record_stream(s); });
}
