// Lazyjit storages in shared memory (implemented in lazy_storage.cpp): what share_memory_() makes, and what
// torch.multiprocessing sends to another process (python/lazyjit/_pickle.py),
// as CPU storages move to shared memory when shared and sent.
//
// A shared storage's home is `LazyStorage::shm`: the storage's bytes in a CPU
// shared-memory block (a uint8 tensor), mapped by every process that holds the
// storage (a forked child inherits the mapping; a process that receives the
// storage maps the same block). Its materialized `data` is always a view of
// that block, so:
//  - a graph that reads the storage reads the block when it runs;
//  - whatever replaces the storage's data (a sync's result, assign_data, an
//    eager kernel's in-place write) is written into the block, where every
//    other process sees it, as a write to a shared CPU tensor is;
//  - before the block is written, a graph that read the storage's elements
//    and has not run yet gets a copy of them (the elements it read), as it
//    would keep the old data of a storage that is not shared;
//  - its size is fixed (not resizable, as a shared CPU storage is not).
// A write recorded into a shared storage and still pending when the process
// ends runs then (sync_shared_storages: at exit, and when a
// multiprocessing.Process's target returns), since another process may be
// waiting for it. Only the CPU target shares: under LAZYJIT_TARGET=cuda the
// elements live on a GPU, and share_storage raises.
#pragma once
#include <ATen/core/Tensor.h>

#include "tracer/lazy_storage.h"

namespace lazyjit::tracer {

// Moves `t`'s storage to `shm`, a uint8 CPU tensor over shared memory of
// exactly the storage's bytes. `keep`: the storage's elements (pending ones
// computed first) are copied there; otherwise the storage takes the elements
// `shm` holds (a storage another process sent). Nothing to do when the storage
// is shared already.
void share_storage(const at::Tensor& t, const at::Tensor& shm, bool keep);
// The shared memory under `t`'s storage, undefined when it is not shared.
at::Tensor shared_memory(const at::Tensor& t);
// Makes `d` (1-D, `s`'s elements on data_device()) the data of `s`: for a
// shared storage, copied into its shared memory (above), which `s.data` views.
void set_storage_data(LazyStorage& s, const at::Tensor& d);
// Before an eager kernel writes a shared storage's elements in place: the
// graphs that read them and have not run keep a copy.
void before_shared_write(LazyStorage& s);
// Runs the pending graphs that write a shared storage.
void sync_shared_storages();
// ~LazyStorage of a shared storage.
void forget_shared(LazyStorage* s);

}  // namespace lazyjit::tracer
