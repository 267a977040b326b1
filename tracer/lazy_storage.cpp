#include "tracer/lazy_storage.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <ATen/core/TensorBase.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "runtime/backend.h"
#include "runtime/runtime.h"
#include "tracer/device_memory.h"
#include "tracer/shared_storage.h"
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

LazyStorage::~LazyStorage() {
  if (shm.defined()) forget_shared(this);
  TraceContext::get().forget(this);
}

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

// Storages in shared memory (tracer/shared_storage.h).
namespace {
// The shared storages alive in this process. Guarded by TraceContext::mutex().
std::unordered_set<LazyStorage*>& shared_storages() {
  static auto* s = new std::unordered_set<LazyStorage*>();  // outlives static destructors
  return *s;
}

}  // namespace

void share_storage(const at::Tensor& t, const at::Tensor& shm, bool keep) {
  TORCH_CHECK(runtime::backend().data_on_host(), "lazyjit: a lazyjit tensor cannot be put in shared memory (share_memory_(), or "
              "sent to another process) under LAZYJIT_TARGET=", runtime::backend().name(),
              ": its elements live on the GPU; share a CUDA tensor instead (t.cuda()), or run on the CPU target");
  TORCH_CHECK(shm.device().is_cpu() && shm.scalar_type() == at::kByte && shm.dim() == 1 && shm.is_contiguous(),
              "lazyjit: share_storage: expected a 1-D uint8 CPU tensor");
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  LazyStorage& s = storage_of(t);
  if (s.shm.defined()) return;
  const c10::Storage& st = t.storage();
  TORCH_CHECK(static_cast<size_t>(shm.numel()) == st.nbytes(), "lazyjit: share_storage: ", shm.numel(),
              " bytes of shared memory for a storage of ", st.nbytes());
  TraceContext& ctx = TraceContext::get();
  at::Tensor whole, elements;
  if (keep) {
    const int64_t isz = static_cast<int64_t>(c10::elementSize(s.dtype));
    TORCH_CHECK(s.numel * isz <= shm.numel(), "lazyjit: share_memory_(): the storage's ", st.nbytes(),
                " bytes do not hold a whole number of its ", s.dtype, " elements");
    whole = make_tensor(st, s.dtype, {s.numel}, {1}, 0);
    // Pending elements are computed first; uninitialized ones read as zeros,
    // as a new shared-memory block holds.
    elements = ctx.cpu_view(whole, "share_memory_()");
  } else {
    // A storage another process sent: the block holds its elements (bytes,
    // typed by the tensors set onto it, as any untyped storage).
    whole = make_tensor(st, at::kByte, {shm.numel()}, {1}, 0);
    elements = shm;
  }
  s.shm = shm;
  shared_storages().insert(&s);
  st.unsafeGetStorageImpl()->set_resizable(false);
  ctx.assign_data(whole, elements);
}

at::Tensor shared_memory(const at::Tensor& t) {
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  return storage_of(t).shm;
}

at::Tensor data_alias(const at::Tensor& data, at::IntArrayRef sizes, at::IntArrayRef strides, int64_t offset) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(data.storage()), data.key_set(), data.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, offset);
  return t;
}

void set_storage_data(LazyStorage& s, const at::Tensor& d) {
  if (!s.shm.defined()) {
    s.data = d;
    return;
  }
  const int64_t bytes = d.numel() * static_cast<int64_t>(d.element_size());
  TORCH_CHECK(d.device().is_cpu() && d.dim() == 1 && bytes <= s.shm.numel(), "lazyjit: a storage in shared memory (",
              s.shm.numel(), " bytes) cannot take ", bytes, " bytes of elements: storages in shared memory cannot be "
              "resized");
  at::Tensor home = s.shm.narrow(0, 0, bytes).view(d.scalar_type());
  if (d.data_ptr() != home.data_ptr() || d.stride(0) != 1) {
    before_shared_write(s);
    home.copy_(d);
  }
  s.data = home;
}

void before_shared_write(LazyStorage& s) {
  TraceContext::detach_inputs(s.shm.storage().unsafeGetStorageImpl());
}

void sync_shared_storages() {
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  std::vector<TraceContext*> owners;
  for (LazyStorage* s : shared_storages()) {
    TraceContext* o = TraceContext::pending_owner(*s);
    if (o && !o->reads_only(*s) && std::find(owners.begin(), owners.end(), o) == owners.end()) owners.push_back(o);
  }
  for (TraceContext* o : owners) o->sync("a write to shared memory, pending when the process ends");
}

void forget_shared(LazyStorage* s) {
  std::lock_guard<std::recursive_mutex> lock(TraceContext::mutex());
  shared_storages().erase(s);
}

}  // namespace lazyjit::tracer
