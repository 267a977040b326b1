// Memory for program results, reused between steps. Large buffers freed by a
// step (or by the user dropping a result) go back to a pool keyed by size, so
// the next step of the same program gets memory whose pages are already mapped:
// no page faults, no zeroing by the kernel. Small buffers go to malloc.
#pragma once
#include <c10/core/Allocator.h>

namespace lazyjit::executor {

c10::Allocator* buffer_pool();
// Bytes held by the pool for reuse (tests and metrics).
size_t pooled_bytes();

}  // namespace lazyjit::executor
