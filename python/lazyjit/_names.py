"""The names the calling code gives its tensors, for recompile explanations.

When a graph compiles, the runtime explains what differs from the graph
compiled before at the same call site, input by input. It names each input as
the user's code does, the way Dynamo's guards name their sources: a local
(`x`), a module's parameter or buffer (`model.layers[0].weight`), an item of a
list, tuple or dict (`batch['input_ids']`). The C++ side (tracer/input_names.h)
calls named_tensors() and names each graph input by the first tensor listed
that shares its storage. Called only on a compile, never per op.
"""
import os
import sys

import torch

_LIBRARY_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)))
_USER_FRAMES = 4       # frames of the user's code looked at, innermost first
_MAX_TENSORS = 20000   # a bound on the work for a huge model
_MAX_ITEMS = 64        # items of a list, tuple or dict looked at


def _module_path(root: str, qualified: str) -> str:
    """"layers.0.weight" under `model` -> "model.layers[0].weight"."""
    out = root
    for part in qualified.split("."):
        out += f"[{part}]" if part.isdigit() else f".{part}"
    return out


def _add(out: list, name: str, value, depth: int) -> None:
    if len(out) >= _MAX_TENSORS:
        return
    if isinstance(value, torch.Tensor):
        out.append((name, value))
    elif isinstance(value, torch.nn.Module):
        for q, t in value.named_parameters():
            out.append((_module_path(name, q), t))
        for q, t in value.named_buffers():
            out.append((_module_path(name, q), t))
    elif depth == 0 and isinstance(value, (list, tuple)):
        for i, item in enumerate(value[:_MAX_ITEMS]):
            _add(out, f"{name}[{i}]", item, 1)
    elif depth == 0 and isinstance(value, dict):
        for k, item in list(value.items())[:_MAX_ITEMS]:
            if isinstance(k, (str, int)):
                _add(out, f"{name}[{k!r}]", item, 1)


def named_tensors() -> list:
    """(name, tensor) for the tensors the innermost frames of user code hold, innermost first."""
    out = []
    frame = sys._getframe(0).f_back
    seen = 0
    while frame is not None and seen < _USER_FRAMES and len(out) < _MAX_TENSORS:
        file = frame.f_code.co_filename
        if not file.startswith(_LIBRARY_DIRS) and not file.startswith("<frozen"):
            seen += 1
            for name, value in list(frame.f_locals.items()):
                _add(out, name, value, 0)
        frame = frame.f_back
    return out
