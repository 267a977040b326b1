// The memory behind lazyjit tensors. A c10::StorageImpl owns one LazyStorage
// through its DataPtr; every view of the storage shares it, which is what gives
// views and in-place ops PyTorch's aliasing semantics.
//
// A LazyStorage holds its elements in one of three ways:
//  - pending: `value` in the graph `owner` records (while `epoch` is that
//    graph's), whose flat slots in memory order are the storage's elements;
//  - materialized: `data`, a 1-D tensor of `numel` elements on data_device():
//    the CPU, or the GPU under the CUDA target (PyTorch's caching allocator);
//  - uninitialized: neither (fresh from empty()).
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>
#include <c10/core/TensorOptions.h>

#include <memory>
#include <string>

#include "graph_ir/graph.h"

namespace lazyjit::tracer {

class TraceContext;

struct LazyStorage {
  int64_t numel;
  at::ScalarType dtype;
  uint64_t seq;  // creation order: a deterministic output order at sync
  at::Tensor data;
  uint64_t epoch = 0;  // graph the value belongs to; 0 = none
  // The context whose graph holds the value (while `epoch` is that graph's), or
  // last held it or gave the storage its data.
  TraceContext* owner = nullptr;
  ir::ValueId value = 0;
  // Set when a sync that was to compute this storage failed: reading it raises
  // this error instead of returning stale or made-up elements.
  std::shared_ptr<const std::string> lost;
  // Where the trace context lists it among the storages the graph of epoch
  // `touched_epoch` changed (TraceContext::touch).
  uint64_t touched_epoch = 0;
  size_t touched_index = 0;
  // lazyjit.mark_dynamic (kMarkDynamic) / mark_static (kMarkStatic): how the
  // graphs that read its data compile their kernels (lowering/shapes.h).
  uint8_t marks = 0;
  static constexpr uint8_t kMarkDynamic = 1, kMarkStatic = 2;
  // Its bytes in the device's memory statistics (tracer/device_memory.h).
  int64_t counted_bytes = 0;
  // In shared memory (share_memory_(), torch.multiprocessing): its bytes there,
  // a uint8 CPU tensor that `data` views (tracer/shared_storage.h).
  at::Tensor shm;
  ~LazyStorage();
};

// A new storage of `numel` elements of `dtype`, and a tensor over it.
c10::Storage make_storage(int64_t numel, at::ScalarType dtype);
at::Tensor make_tensor(c10::Storage storage, at::ScalarType dtype, at::IntArrayRef sizes,
                       at::IntArrayRef strides, int64_t offset);
// A tensor over `data`'s storage with this geometry: what as_strided gives,
// without a dispatcher call (for data the tracer hands to kernels or keeps;
// `data` never needs gradients).
at::Tensor data_alias(const at::Tensor& data, at::IntArrayRef sizes, at::IntArrayRef strides, int64_t offset);
// Throws unless `t` is a lazyjit tensor.
LazyStorage& storage_of(const at::Tensor& t);
bool is_lazy(const at::Tensor& t);

c10::Allocator* lazy_allocator();

// Where materialized data lives and what the op-by-op paths (step mode,
// run_eager) run on: where programs run, the backend's data device
// (runtime/backend.h: the CPU; the current CUDA device under LAZYJIT_TARGET=cuda).
c10::Device data_device();
// New data of `dtype` there.
inline at::TensorOptions on_device(at::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(data_device());
}

}  // namespace lazyjit::tracer
