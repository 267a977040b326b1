#include "lowering/interrupt.h"

#include <atomic>
#include <chrono>

namespace lazyjit::lowering {

namespace {
std::atomic<InterruptPoll> g_poll{nullptr};
std::atomic<InterruptRaise> g_raise{nullptr};
std::atomic<bool> g_requested{false};
std::atomic<int64_t> g_last_poll_ns{0};
constexpr int64_t kPollEveryNs = 10'000'000;
thread_local int t_no_poll = 0;
}  // namespace

NoPollScope::NoPollScope() { ++t_no_poll; }
NoPollScope::~NoPollScope() { --t_no_poll; }

void set_interrupt_handlers(InterruptPoll poll, InterruptRaise raise) {
  g_poll = poll;
  g_raise = raise;
}

bool interrupt_requested() {
  if (g_requested.load(std::memory_order_relaxed)) return true;
  if (t_no_poll) return false;
  InterruptPoll poll = g_poll.load(std::memory_order_relaxed);
  if (!poll) return false;
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch()).count();
  if (now - g_last_poll_ns.load(std::memory_order_relaxed) < kPollEveryNs) return false;
  g_last_poll_ns = now;
  if (poll()) g_requested = true;
  return g_requested;
}

void throw_if_interrupted() {
  if (!interrupt_requested()) return;
  if (t_no_poll) throw Interrupted();
  if (InterruptRaise raise = g_raise.load()) raise();
  throw Interrupted();
}

bool interrupt_seen() { return g_requested.load(); }

void clear_interrupt() { g_requested = false; }

}  // namespace lazyjit::lowering
