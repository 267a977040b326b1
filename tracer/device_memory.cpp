#include "tracer/device_memory.h"

#include <mutex>

namespace lazyjit::tracer {
namespace {

using c10::CachingDeviceAllocator::Stat;
using c10::CachingDeviceAllocator::StatType;

// One lock: storages are made and freed at most once per recorded op, and the
// counters must agree with each other when read.
std::mutex mu;
Stat bytes, count;

void update(Stat& s, int64_t delta) {
  s.current += delta;
  s.peak = std::max(s.peak, s.current);
  if (delta > 0) s.allocated += delta;
  else s.freed -= delta;
}

}  // namespace

void note_device_bytes(int64_t delta, bool allocation_or_free) {
  std::lock_guard<std::mutex> lock(mu);
  update(bytes, delta);
  if (allocation_or_free) update(count, delta > 0 ? 1 : delta < 0 ? -1 : 0);
}

c10::CachingDeviceAllocator::DeviceStats device_memory_stats() {
  std::lock_guard<std::mutex> lock(mu);
  c10::CachingDeviceAllocator::DeviceStats s;
  const auto all = static_cast<size_t>(StatType::AGGREGATE);
  // No cache between storages and memory: what is allocated is what is
  // reserved and active.
  for (auto* a : {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.requested_bytes}) (*a)[all] = bytes;
  for (auto* a : {&s.allocation, &s.segment, &s.active}) (*a)[all] = count;
  return s;
}

void reset_device_peak() {
  std::lock_guard<std::mutex> lock(mu);
  bytes.peak = bytes.current;
  count.peak = count.current;
}

void reset_device_accumulated() {
  std::lock_guard<std::mutex> lock(mu);
  bytes.allocated = bytes.freed = count.allocated = count.freed = 0;
}

}  // namespace lazyjit::tracer
