#include "tracer/lazy_storage.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <ATen/core/TensorBase.h>

#include <atomic>

#include "runtime/runtime.h"
#include "tracer/device_memory.h"
#include "tracer/streams.h"
#include "tracer/trace_context.h"

namespace lazyjit::tracer {

namespace {
std::atomic<uint64_t> next_seq{1};

void delete_storage(void* p) {
  auto* s = static_cast<LazyStorage*>(p);
  note_device_bytes(-s->counted_bytes, /*allocation_or_free=*/true);
  delete s;
}

LazyStorage* counted(LazyStorage* s, size_t nbytes) {
  s->counted_bytes = static_cast<int64_t>(nbytes);
  note_device_bytes(s->counted_bytes, /*allocation_or_free=*/true);
  return s;
}

// The data pointer is the LazyStorage itself: unique per storage (so code that
// compares data_ptr()s to find tied weights works) and never dereferenced.
c10::DataPtr make_data_ptr(LazyStorage* s) {
  return c10::DataPtr(s, s, &delete_storage, c10::Device(c10::DeviceType::PrivateUse1, 0));
}

// A device allocator, as torch.accelerator expects of an accelerator's:
// storages are made here (their elements live where the runtime computes
// them), with the memory statistics of tracer/device_memory.h.
struct LazyAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    // Untyped allocations (e.g. from untyped_storage resizes) are bytes.
    auto* s = new LazyStorage{static_cast<int64_t>(nbytes), at::kByte, next_seq++};
    return make_data_ptr(counted(s, nbytes));
  }
  bool initialized() override { return true; }
  // torch.accelerator.empty_cache(): the blocks the runtime keeps for
  // programs' buffers go back to the system (the storages stay).
  void emptyCache(c10::MempoolId_t) override { runtime::release_cached_memory(); }
  // One stream: programs run in the order they were recorded, so a storage is
  // never handed out while a program on another stream may still read it.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  // Each raises for an index other than the device's, as set_device does
  // (tracer/streams.h check_device_index; CUDA's "invalid device ordinal").
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex i) override {
    check_device_index(i);
    return device_memory_stats();
  }
  void resetAccumulatedStats(c10::DeviceIndex i) override {
    check_device_index(i);
    reset_device_accumulated();
  }
  void resetPeakStats(c10::DeviceIndex i) override {
    check_device_index(i);
    reset_device_peak();
  }
  // The elements live in the host's memory (the CPU target's data device).
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex i) override {
    check_device_index(i);
    return runtime::host_memory_info();
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(false, "lazyjit: raw copies of device memory are not supported");
  }
};
LazyAllocator allocator;
}  // namespace

LazyStorage::~LazyStorage() { TraceContext::get().forget(this); }

c10::Allocator* lazy_allocator() { return &allocator; }

c10::Storage make_storage(int64_t numel, at::ScalarType dtype) {
  auto* s = new LazyStorage{numel, dtype, next_seq++};
  size_t nbytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, make_data_ptr(counted(s, nbytes)), &allocator,
      /*resizable=*/true));
}

at::Tensor make_tensor(c10::Storage storage, at::ScalarType dtype, at::IntArrayRef sizes,
                       at::IntArrayRef strides, int64_t offset) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::fromScalarType(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return t;
}

bool is_lazy(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

c10::Device data_device() {
  // Fixed when the backend is made (the CUDA device PyTorch has current then).
  static const c10::Device device = runtime::backend().data_device();
  return device;
}

LazyStorage& storage_of(const at::Tensor& t) {
  TORCH_CHECK(is_lazy(t), "lazyjit: expected a lazyjit tensor, got one on ", t.device());
  auto* s = static_cast<LazyStorage*>(t.storage().data_ptr().get_context());
  TORCH_CHECK(s, "lazyjit: tensor has no lazyjit storage");
  return *s;
}

}  // namespace lazyjit::tracer
