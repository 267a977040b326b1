"""Pickling lazyjit tensors, as CUDA tensors pickle.

A lazyjit storage's data pointer is a handle, not memory: PyTorch code that
reads a storage's bytes through that pointer cannot work. Two paths do:

- ``UntypedStorage._write_file`` and ``_set_from_file``, which plain
  ``pickle`` reaches (a tensor reduces to its storage, whose ``__reduce__``
  saves it in the legacy format) as does ``torch.save(...,
  _use_new_zipfile_serialization=False)`` and its load: they wrap the pointer
  with ``at::from_blob`` and copy that to or from the CPU. A lazyjit storage
  writes its CPU copy instead (``storage.cpu()``: a sync of what is pending),
  in the same format, and reads into a CPU storage copied onto it.
- ``multiprocessing``'s pickler (queues, pools, a ``Process``'s arguments
  under spawn), which shares a CPU storage's memory with the other process:
  as a CPU storage, a lazyjit storage moves to shared memory when sent (its
  elements computed first) and the other process rebuilds a lazyjit storage
  over the same memory. Each side's writes reach the other, as with CPU or
  CUDA tensors; the sender keeps the memory alive as long as its storage.

Shared memory (tracer/shared_storage.h): ``share_memory_()`` moves a lazyjit
storage there, as it moves a CPU storage, and ``is_shared()`` says whether it
is. The storage's elements then live in the shared block, which a forked
child inherits (the Hogwild pattern: a worker's in-place updates reach the
parent); a sync's results are written into it. A write still pending when a
process ends (a ``multiprocessing.Process``'s target returning, or the
interpreter exiting) runs then. Only the CPU target shares: under
``LAZYJIT_TARGET=cuda`` the elements live on a GPU; ``share_memory_()``
raises there, and queues send a copy.

Offsets, sizes and strides travel as for any tensor, so views round-trip too.
"""
import atexit
import multiprocessing.util

import torch

from . import _C

_BACKEND = "lazyjit"


def _is_lazyjit(storage) -> bool:
    return storage.device.type == _BACKEND


def _patch_file_io():
    cls = torch.UntypedStorage
    write, read = cls._write_file, cls._set_from_file

    def _write_file(self, *args, **kwargs):
        if _is_lazyjit(self):
            return write(self.cpu(), *args, **kwargs)
        return write(self, *args, **kwargs)

    def _set_from_file(self, *args, **kwargs):
        if _is_lazyjit(self):
            cpu = torch.UntypedStorage(self.nbytes())
            read(cpu, *args, **kwargs)
            self.copy_(cpu)
            return self
        return read(self, *args, **kwargs)

    cls._write_file = _write_file
    cls._set_from_file = _set_from_file


def _as_tensor(storage) -> torch.Tensor:
    """A uint8 tensor over all of `storage` (how _C takes a storage)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _shared_memory(storage):
    """The CPU storage in shared memory under lazyjit `storage`, or None."""
    shm = _C.shared_memory(_as_tensor(storage))
    return None if shm is None else shm.untyped_storage()


def _share(storage):
    """Moves lazyjit `storage` to shared memory (once; its elements computed
    first) and returns the CPU storage there."""
    shm = _shared_memory(storage)
    if shm is not None:
        return shm
    if not _C.data_on_host():
        raise RuntimeError(
            "lazyjit: share_memory_(): under LAZYJIT_TARGET=cuda a lazyjit tensor's elements live on the GPU, "
            "which lazyjit cannot share between processes; share a CUDA tensor instead (t.cuda().share_memory_()), "
            "or use the CPU target")
    n = storage.nbytes()
    # A new block, as CPU storages get one (file_descriptor or file_system, as
    # torch.multiprocessing's sharing strategy says); an empty storage has no
    # memory to share.
    cpu = torch.UntypedStorage._new_shared(n) if n else torch.UntypedStorage(0)
    _C.share_storage(_as_tensor(storage), _as_tensor(cpu), True)
    return _shared_memory(storage)


def _patch_sharing():
    cls = torch.UntypedStorage
    share, is_shared = cls.share_memory_, cls.is_shared

    def share_memory_(self, *args, **kwargs):
        if _is_lazyjit(self):
            _share(self)
            return self
        return share(self, *args, **kwargs)

    def is_shared_(self):
        if _is_lazyjit(self):
            return _shared_memory(self) is not None
        return is_shared(self)

    share_memory_.__doc__ = share.__doc__
    cls.share_memory_ = share_memory_
    cls.is_shared = is_shared_


def _rebuild_storage(cpu_storage, device):
    """A lazyjit storage from the CPU copy another process sent (the CUDA target)."""
    return cpu_storage.to(device=device)


def _rebuild_shared_storage(shm, device):
    """A lazyjit storage over the shared memory another process sent."""
    storage = torch.UntypedStorage(shm.nbytes(), device=device)
    _C.share_storage(_as_tensor(storage), _as_tensor(shm), False)
    return storage


def _register_multiprocessing():
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing.reductions as reductions

    reduce_storage = reductions.reduce_storage

    def reduce_lazyjit_aware(storage):
        if _is_lazyjit(storage):
            if not _C.data_on_host():
                # A copy (nothing owns it once pickled: fine for queues, which
                # duplicate its descriptor at once, not for spawn's arguments).
                return (_rebuild_storage, (storage.cpu(), str(storage.device)))
            return (_rebuild_shared_storage, (_share(storage), str(storage.device)))
        return reduce_storage(storage)

    ForkingPickler.register(torch.UntypedStorage, reduce_lazyjit_aware)


# Writes into shared storages still pending when a process ends run then:
# another process may be waiting for them. At interpreter exit, and when a
# multiprocessing.Process's target returns (its child leaves through
# os._exit, after multiprocessing's finalizers; those registered before the
# child started are dropped there, so each child registers its own).
class _AfterFork:
    pass


_after_fork_key = _AfterFork()


def _register_exit_sync(*_):
    multiprocessing.util.Finalize(None, _C.sync_shared_storages, exitpriority=100)


_patch_file_io()
_patch_sharing()
_register_multiprocessing()
atexit.register(_C.sync_shared_storages)
_register_exit_sync()
multiprocessing.util.register_after_fork(_after_fork_key, _register_exit_sync)
