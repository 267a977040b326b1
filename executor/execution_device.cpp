#include "executor/execution_device.h"

#include <atomic>

namespace lazyjit::executor {

namespace {
// DeviceType and index packed: the device is read on every ATen step's prepare.
std::atomic<int32_t> g_device{static_cast<int32_t>(c10::DeviceType::CPU) << 8};
}  // namespace

c10::Device execution_device() {
  int32_t d = g_device.load(std::memory_order_relaxed);
  auto type = static_cast<c10::DeviceType>(d >> 8);
  return type == c10::DeviceType::CPU ? c10::Device(type) : c10::Device(type, static_cast<c10::DeviceIndex>(d & 0xff));
}

void set_execution_device(c10::Device d) {
  int32_t index = d.has_index() ? d.index() : 0;
  g_device.store((static_cast<int32_t>(d.type()) << 8) | (index & 0xff), std::memory_order_relaxed);
}

}  // namespace lazyjit::executor
