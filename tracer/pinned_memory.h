// Pinned host memory for the lazyjit device: host memory like any other on the
// CPU target (lazyjit's copies are synchronous), page-locked memory from CUDA's
// host allocator under the CUDA target, handed out by an allocator that
// remembers what it allocated, so that tensor.is_pinned() is true for it, as
// PyTorch code that pins a buffer for a device (DDP's reducer, DataLoader's
// pin_memory) expects.
#pragma once

namespace c10 {
struct Allocator;
}

namespace lazyjit::tracer {

c10::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* data);

}  // namespace lazyjit::tracer
