// Memory for program results, reused between steps. Large buffers freed by a
// step (or by the user dropping a result) go back to a pool keyed by size, so
// the next step of the same program gets memory whose pages are already mapped:
// no page faults, no zeroing by the kernel. Small buffers go to malloc.
//
// The pool is bounded: it keeps at most kPoolCap bytes, and when a freed block
// would pass that, the blocks that have waited longest are returned to the
// system first. A workload whose shapes keep changing (every size new) thus
// holds at most the cap, while a steady training loop reuses every buffer.
//
// Kernels allocate their results from the pool directly. ATen's library steps
// (GEMMs, gelu_backward, ...) allocate through ATen's CPU allocator; while a
// program runs on a thread (ProgramAllocations), that thread's large ATen
// allocations come from the pool too. Without it, glibc grows and trims its
// heap around every training step's big results, and each step faults the
// pages in again (torch.compile's backward returning fresh gradients: 10k
// page faults, ~20% of a step; bench/README.md). Other threads, and this one
// outside programs, allocate exactly as before.
#pragma once
#include <c10/core/Allocator.h>

#include <cstddef>

namespace lazyjit::executor {

c10::Allocator* buffer_pool();
// Bytes held by the pool for reuse (tests and metrics).
size_t pooled_bytes();
// Returns every pooled block to the system (lazyjit.clear_cache()).
void trim_buffer_pool();

// While alive, ATen's CPU allocations of at least the pool's size on this
// thread come from the pool. The first one installs lazyjit's CPU allocator
// (it passes every other allocation to the one it replaced); when another
// allocator of higher priority is installed, ATen keeps that one and this
// changes nothing. Nests.
class ProgramAllocations {
 public:
  ProgramAllocations();
  ~ProgramAllocations();
  ProgramAllocations(const ProgramAllocations&) = delete;
  ProgramAllocations& operator=(const ProgramAllocations&) = delete;

 private:
  bool outer_;
};

}  // namespace lazyjit::executor
