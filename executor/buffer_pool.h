// Memory for program results, reused between steps. Large buffers freed by a
// step (or by the user dropping a result) go back to a pool keyed by size, so
// the next step of the same program gets memory whose pages are already mapped:
// no page faults, no zeroing by the kernel. Small buffers go to malloc.
//
// The pool is bounded: it keeps at most kPoolCap bytes, and when a freed block
// would pass that, the blocks that have waited longest are returned to the
// system first. A workload whose shapes keep changing (every size new) thus
// holds at most the cap, while a steady training loop reuses every buffer.
#pragma once
#include <c10/core/Allocator.h>

#include <cstddef>

namespace lazyjit::executor {

c10::Allocator* buffer_pool();
// Bytes held by the pool for reuse (tests and metrics).
size_t pooled_bytes();
// Returns every pooled block to the system (lazyjit.clear_cache()).
void trim_buffer_pool();

}  // namespace lazyjit::executor
