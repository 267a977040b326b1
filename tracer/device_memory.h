// The lazyjit device's memory statistics, as torch.accelerator and
// torch.lazyjit's memory functions read them (memory_allocated,
// max_memory_allocated, memory_stats, reset_peak_memory_stats): the bytes of
// the lazyjit storages alive now, their peak, and counts of allocations and
// frees. A storage's bytes are what its tensors address (sizes × element
// size), whether its elements are computed yet or still pending.
#pragma once
#include <c10/core/CachingDeviceAllocator.h>

#include <cstdint>

namespace lazyjit::tracer {

// A storage of `bytes` made (+) or freed (-), or resized (the difference).
void note_device_bytes(int64_t delta, bool allocation_or_free);

c10::CachingDeviceAllocator::DeviceStats device_memory_stats();
void reset_device_peak();
void reset_device_accumulated();

}  // namespace lazyjit::tracer
