#include "tracer/pinned_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <mutex>
#include <unordered_set>

#include "runtime/backend.h"
#include "tracer/lazy_storage.h"

namespace lazyjit::tracer {

namespace {

struct Pinned {
  std::mutex mu;
  std::unordered_set<const void*> live;  // data pointers this allocator handed out
};

Pinned& pinned() {
  static auto* p = new Pinned();  // outlives every tensor, even at exit
  return *p;
}

struct PinnedAllocator final : c10::Allocator {
  static void free(void* ctx) {
    auto* dp = static_cast<c10::DataPtr*>(ctx);
    {
      std::lock_guard<std::mutex> lock(pinned().mu);
      pinned().live.erase(dp->get());
    }
    delete dp;  // the CPU allocation's own deleter frees the memory
  }

  c10::DataPtr allocate(size_t n) override {
    // Under the CUDA target, page-locked memory from CUDA's host allocator, so
    // that copies from it to the GPU run at full speed (and asynchronously
    // where PyTorch's CUDA copies are asked to).
    static c10::Allocator* const host = runtime::backend().pinned_host_allocator();
    auto cpu = host->allocate(n);
    void* data = cpu.get();
    if (data == nullptr) return cpu;  // zero bytes: nothing to remember
    {
      std::lock_guard<std::mutex> lock(pinned().mu);
      pinned().live.insert(data);
    }
    auto* ctx = new c10::DataPtr(std::move(cpu));
    return {data, ctx, &PinnedAllocator::free, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

c10::Allocator* pinned_allocator() {
  static PinnedAllocator a;
  return &a;
}

bool is_pinned_ptr(const void* data) {
  if (data == nullptr) return false;
  std::lock_guard<std::mutex> lock(pinned().mu);
  return pinned().live.count(data) != 0;
}

}  // namespace lazyjit::tracer
