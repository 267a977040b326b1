"""torch.lazyjit: the lazyjit device's module, as torch.cuda and torch.xpu are
their devices' (``torch.get_device_module("lazyjit")``; FSDP2, DeviceMesh and
torch.accelerator call it).

One device (index 0). Streams and events follow PyTorch's device-module
protocol; what they mean on a device that records ops and runs them at a sync
is in tracer/streams.h:

- every stream feeds one queue, the recorded work, run in the order recorded:
  work under ``with torch.lazyjit.stream(s):`` is recorded and computed as
  without it, and waiting on a stream or an event orders later work after the
  awaited point by construction;
- ``Event.record()`` marks a point in the recorded work; ``query()`` is True
  once a sync has run the work recorded before it, ``synchronize()`` runs that
  work (a sync) if it has not run;
- ``elapsed_time`` (``enable_timing=True``) gives the time between the points
  as reached: a point is reached when recorded with nothing pending, else when
  the sync that ran it finished. Only syncs run by ``Event.synchronize()``,
  ``Stream.synchronize()`` or ``torch.lazyjit.synchronize()`` note the time;
  elapsed_time over an event another sync ran (``.item()``, ``.cpu()``) raises.
"""
from __future__ import annotations

import torch

from . import _C

__all__ = ["Stream", "Event", "StreamContext", "stream", "current_stream", "default_stream", "set_stream",
           "synchronize", "device", "device_count", "current_device", "set_device", "is_available",
           "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "memory_stats", "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache",
           "mem_get_info"]


def _index(device) -> int:
    """The index `device` names on lazyjit (None: the current one, 0): an int,
    "lazyjit:0" or a torch.device. A device of another type is a ValueError;
    an index other than 0 is a RuntimeError here, before anything runs, as for
    set_device (tracer/streams.h check_device_index, as CUDA raises "invalid
    device ordinal")."""
    if device is None:
        return 0
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        d = torch.device(device)
        if d.type != "lazyjit":
            raise ValueError(f"lazyjit: expected a lazyjit device, got {d}")
        index = 0 if d.index is None else d.index
    _C.check_device_index(index)
    return index


class Stream(torch.Stream):
    """A lazyjit stream: a name for the one queue (tracer/streams.h). Each new
    stream has an id of its own; ``priority`` is accepted and has no effect."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:  # wraps an existing stream (current_stream, default_stream)
            return super().__new__(cls, priority=priority, **kwargs)
        return super().__new__(cls, device=torch.device("lazyjit", _index(device)), priority=priority)


class _LazyjitEvents(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Event) and obj.device.type == "lazyjit"


class Event(torch.Event, metaclass=_LazyjitEvents):
    """A point in the recorded work (tracer/streams.h). ``blocking`` changes
    nothing: synchronize() runs the work on the calling thread.

    ``Event()`` makes a ``torch.Event`` on the lazyjit device, which counts as
    an instance of this class: torch.Event.elapsed_time takes only exact
    torch.Events."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise ValueError("lazyjit: events cannot be shared between processes (interprocess=True)")
        return torch.Event(device="lazyjit", enable_timing=enable_timing, blocking=blocking)


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device=None) -> Stream:
    """The calling thread's current stream."""
    return _wrap(torch.accelerator.current_stream(_index(device)))


def default_stream(device=None) -> Stream:
    s = torch.accelerator.current_stream(_index(device))
    return Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """``with torch.lazyjit.stream(s):`` makes ``s`` the current stream for the
    block (None: nothing changes), as torch.cuda.stream does."""

    def __init__(self, stream):
        self.stream = stream
        self.previous = None

    def __enter__(self):
        if self.stream is not None:
            self.previous = torch.accelerator.current_stream()
            torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.previous is not None:
            torch.accelerator.set_stream(self.previous)
            self.previous = None
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)


def synchronize(device=None) -> None:
    """Runs everything the calling thread recorded (a sync, as lazyjit.sync())
    and times the events it reaches."""
    torch.accelerator.synchronize(_index(device))


class device:
    """``with torch.lazyjit.device(i):`` (storage moves use it); one device,
    nothing to switch, and any other index raises."""

    def __init__(self, device):
        self.idx = _index(device)

    def __enter__(self):
        if self.idx != -1:
            torch.accelerator.set_device_index(self.idx)
        return self

    def __exit__(self, *exc):
        return False


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device) -> None:
    """Index 0 (or None) is the device; any other raises RuntimeError, as CUDA
    does for an ordinal past its devices."""
    torch.accelerator.set_device_index(_index(device))


def is_available() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


# Dynamo asks before it makes fake tensors on the device (a factory with
# device="lazyjit" in a compiled function); nothing to initialize.
def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    pass


# Memory statistics: the device allocator's (tracer/device_memory.h), as
# torch.accelerator reads them.
def memory_allocated(device=None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device=None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device=None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device=None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def memory_stats(device=None) -> dict:
    return torch.accelerator.memory_stats(_index(device))


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    torch.accelerator.empty_cache()


def mem_get_info(device=None) -> tuple:
    return torch.accelerator.get_memory_info(_index(device))


# Random ops on lazyjit draw from the generator of where its data lives (see
# docs/design.md), the one the target's backend names (_C.data_generator()):
# the CPU's, which torch.manual_seed seeds before it calls this; under
# LAZYJIT_TARGET=cuda the current GPU's.
def manual_seed_all(seed: int) -> None:
    _C.data_generator().manual_seed(seed)


def manual_seed(seed: int) -> None:
    _C.data_generator().manual_seed(seed)


def get_rng_state(device=None):
    _index(device)
    return _C.data_generator().get_state()


def set_rng_state(state, device=None) -> None:
    _index(device)
    _C.data_generator().set_state(state)


# torch.autocast("lazyjit"): lazyjit computes as eager does on the CPU, so it
# autocasts as the CPU does (csrc/autocast.cpp: CPU autocast's op lists) and
# to the same dtypes (float16 and bfloat16; bfloat16 by default).
def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("lazyjit")


def get_autocast_dtype():
    return torch.get_autocast_dtype("lazyjit")


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
