// Streams and events of the lazyjit device: what the c10 DeviceGuardImpl's
// stream and event hooks do (tracer/api.cpp), behind torch.Stream, torch.Event,
// torch.accelerator and torch.lazyjit.Stream / Event.
//
// lazyjit records ops into a graph per thread and runs it at a sync, in the
// order recorded, on one queue. Streams are names for that queue: a new stream
// gets an id of its own (so code that keys state by stream, as FSDP2 does, sees
// distinct streams) and can be made current per thread, but every stream's
// work is the same recorded work. Waiting on a stream or an event therefore
// orders later work after the awaited point by construction.
//
// An event marks a point in the recorded work: the graph being recorded when
// it was recorded. The point is reached when that graph has run (a sync took
// it); recorded with nothing pending, it is reached at once. query() says
// whether it was reached, without running anything; synchronize() runs the
// graph (a sync) if it has not run.
//
// Timing (events made with enable_timing=True): an event's time is when the
// point was reached: its record time when nothing was pending, else when the
// sync that ran its graph finished, if that sync was one these hooks ran
// (Event.synchronize, Stream.synchronize, torch.lazyjit.synchronize /
// torch.accelerator.synchronize). Other syncs (.item(), .cpu(), printing,
// lazyjit.sync()) do not note the time, and elapsed_time then raises saying so.
// Two points in one graph are reached by the same sync: 0 ms apart.
//
// Under the CUDA target a sync launches its program's kernels on PyTorch's
// current CUDA stream and returns: a reached point means its work was
// launched, and its time is when the launch finished. torch.cuda.synchronize()
// waits for the GPU (not done here: inside a user's CUDA graph capture it
// would break the capture).
#pragma once
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace lazyjit::tracer {

// Raises for a device index other than 0 (or -1, "the current one"): lazyjit
// has one device. Under a launcher that sets LOCAL_RANK (torchrun), that index
// names it too: libraries bind each process to accelerator LOCAL_RANK, as they
// would one GPU each (transformers' tp_plan does set_device_index(LOCAL_RANK)).
// The device stays index 0: current_device() is 0 and tensors are on lazyjit:0.
int launcher_local_rank();  // LOCAL_RANK when set and above 0, else -1
void check_device_index(int64_t index);  // any integer (a DeviceIndex, or a Python int)

c10::Stream current_stream(c10::Device device);  // of the calling thread
c10::Stream exchange_stream(c10::Stream stream);  // makes it current; returns the previous one
c10::Stream new_stream(c10::Device device);

// The guard's event hooks. `event` is null until an event is first recorded.
// c10::Event checks enable_timing itself before it asks for elapsed_ms.
void record_event(void** event, const c10::Stream& stream);
void block_on_event(void* event, const c10::Stream& stream);
bool query_event(void* event);
void synchronize_event(void* event);
double elapsed_ms(void* start, void* end);
void destroy_event(void* event) noexcept;

bool query_stream(const c10::Stream& stream);
// Tensor.record_stream: checks `stream` (a lazyjit stream of this device);
// nothing else to do with one queue.
void record_stream(const c10::Stream& stream);
void synchronize_stream(const c10::Stream& stream);
void synchronize_device();

}  // namespace lazyjit::tracer
