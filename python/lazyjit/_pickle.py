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
- ``multiprocessing``'s pickler (queues, pools), which shares a CPU storage's
  memory with the other process: a lazyjit storage is sent as its CPU copy
  (shared that way) and rebuilt on the lazyjit device there.

Offsets, sizes and strides travel as for any tensor, so views round-trip too.
"""
import torch

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


def _rebuild_storage(cpu_storage, device):
    """A lazyjit storage from the CPU copy another process sent."""
    return cpu_storage.to(device=device)


def _register_multiprocessing():
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing.reductions as reductions

    reduce_storage = reductions.reduce_storage

    def reduce_lazyjit_aware(storage):
        if _is_lazyjit(storage):
            return (_rebuild_storage, (storage.cpu(), str(storage.device)))
        return reduce_storage(storage)

    ForkingPickler.register(torch.UntypedStorage, reduce_lazyjit_aware)


_patch_file_io()
_register_multiprocessing()
