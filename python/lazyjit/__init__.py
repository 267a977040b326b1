"""lazyjit: a graph-capture JIT for PyTorch.

    import torch, lazyjit
    x = torch.randn(4, 4).to("lazyjit")
    y = (x * 2 + 1).relu()        # recorded, not run
    print(y.cpu())                # sync: compile (or hit the cache) and run
"""
import atexit
import contextlib
import inspect
import os

import torch

from . import _C  # registers the "lazyjit" device (PrivateUse1) with PyTorch
from . import distributed  # the "lazyjit" torch.distributed backend (python/lazyjit/distributed.py)

# A program still compiling in the background at exit is finished (the queued
# ones dropped) while the interpreter and LLVM are whole.
atexit.register(_C.stop_background_compiles)

__all__ = ["device", "sync", "set_mode", "mode", "target", "add_op_hook", "metrics", "last_sync", "reset_metrics",
           "metrics_report", "clear_cache", "wait_for_compiles"]


def device(index: int = 0) -> torch.device:
    return torch.device("lazyjit", index)


def sync() -> None:
    """Compiles (or finds in the cache) and runs everything the calling thread
    recorded. Each thread records a graph of its own; a tensor another thread
    recorded is computed when this thread uses it."""
    _C.sync()


def set_mode(mode: str) -> None:
    """"lazy" records ops and runs them at sync points; "step" runs each op at once."""
    _C.set_mode(mode)


def mode() -> str:
    return _C.mode()


def target() -> str:
    """What kernels are compiled for: ``"cpu"`` (the default), ``"cuda"``, or
    ``"cuda-sim"`` (the CUDA target's kernels run on the host CPU: a test
    target, correct but slow; data and library calls stay on the CPU).

    Set by ``LAZYJIT_TARGET`` in the environment before the first lazyjit op
    (it is read once; there is no ``set_target``: programs, caches and the
    compile worker belong to one target). ``LAZYJIT_TARGET=cuda`` needs a CUDA
    build of PyTorch, the CUDA driver and a GPU; without them the first op
    raises ``RuntimeError`` saying which is missing."""
    return _C.target()


def _takes_info(fn) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 4


def add_op_hook(fn, lazy: bool = False):
    """Calls fn(op_name, inputs, outputs) for every op run in step mode, in order.
    Tensors arrive as CPU tensors (CUDA tensors under LAZYJIT_TARGET=cuda: where
    lazyjit keeps its data). Returns a handle with .remove().

    With ``lazy=True`` also for every op of every compiled graph, after the
    graph ran, in recording order, with the values the compiled code computed
    (the graph is then compiled with every op's result stored: a debugging
    tool, slower). A hook that takes a fourth argument gets a dict: ``lazy``
    (from a compiled graph), ``index`` (the op's place in its graph: the node
    number that NaN, check and recompile reports give as "op #N"; -1 in step mode), ``site`` (the line that recorded it), ``duration_ms`` (step mode:
    the eager kernel's time; lazy: the op's share of the kernels that computed
    it), ``kernel`` (those kernels, e.g. ``"fused_2 [mul, add, exp]"``) and
    ``kernel_ms`` (their whole time)."""
    return _C.add_op_hook(fn, bool(lazy), _takes_info(fn))


def metrics() -> dict:
    """Process-wide counters. ``syncs_by_how`` counts each sync once, by how it
    ran: ``cache_hit`` (its program in memory), ``compiled`` (compiled at the
    sync, which waited), ``op_by_op_while_compiling`` (run op by op through ATen
    while its program compiles in the background), ``compiled_in_background``
    (took the program that compile finished), ``loaded_from_disk``,
    ``loaded_from_remote``, ``bound_to_new_sizes`` (a program of the same
    structure bound to new sizes), ``op_by_op_past_recompile_limit``. Ops run on
    the CPU are counted by op in ``fallbacks``."""
    return _C.metrics()


def last_sync() -> str:
    """How this thread's last sync ran, as a key of ``metrics()["syncs_by_how"]``
    (``"op_by_op_while_compiling"``, ``"compiled_in_background"``, ``"cache_hit"``,
    ...); ``""`` before the first."""
    return _C.last_sync()


def reset_metrics() -> None:
    _C.reset_metrics()


def metrics_report(all: bool = False) -> str:
    """The metrics as text: a summary first (syncs by how they ran, compiles and
    their time, fallbacks by op, programs found by cache tier), then counters,
    sync call sites, recompiles and timings. Counters of features that are off
    (the GPU's under the cpu target, the remote cache's without
    LAZYJIT_REMOTE_CACHE) are left out while zero unless ``all``."""
    return _C.metrics_report(all)


def explain_recompiles() -> list:
    """Why each program was compiled, oldest first: dicts with "site" (the sync's
    file:line), "kind" ("first at this site", "new shapes", "new graph") and
    "detail" (what differed from the nearest program compiled there, e.g.
    "input 0 dim 0: 7 → 8 (sizes seen: 1, 7, 8)"). LAZYJIT_LOG=recompiles prints
    each as it happens; metrics_report() groups them by call site."""
    return _C.explain_recompiles()


def clear_cache() -> None:
    _C.clear_cache()


def wait_for_compiles() -> int:
    """Waits until no program is compiling in the background and returns how
    many it waited for. A graph that misses every cache runs op by op while its
    program compiles on a worker thread (LAZYJIT_BACKGROUND_COMPILE=on, the
    default); the first sync after the compile finishes takes the program.
    Call this after a warm-up to time compiled code only."""
    return _C.wait_for_compiles()


@contextlib.contextmanager
def step_mode():
    """Step mode for this region, on this thread: each op runs at once through its
    eager CPU kernel, calling the op hooks (``add_op_hook``); what was recorded
    before runs first. The global mode (``set_mode``) is left as it is."""
    _C.step_region_enter()
    try:
        yield
    finally:
        _C.step_region_exit()


@contextlib.contextmanager
def strict():
    """A region that must stay compiled: inside it an implicit sync (``.item()``,
    ``.cpu()``, printing; anything but ``lazyjit.sync()``), an op run eagerly (a
    fallback) or a compile raises ``RuntimeError`` naming the op or reason and the
    line, before anything runs; nothing is lost. Regions nest, per thread."""
    _C.strict_enter()
    try:
        yield
    finally:
        _C.strict_exit()


def check_graphs(on: bool = True, repro_dir: str = "") -> None:
    """Compiled vs eager, op by op (also ``LAZYJIT_CHECK=1``): each sync
    compiles its graph with every op's result stored, runs it, and runs every
    op that generated code computed again through ATen's eager kernel on the
    same operands. The first op whose results differ beyond tolerance raises
    ``RuntimeError`` naming the op, the line that recorded it, the fused kernel
    and the errors, and writes a standalone repro under ``repro_dir`` (default
    ``./lazyjit_repro``): ``python -m lazyjit.repro DIR`` reruns it."""
    _C.check_graphs(bool(on), str(repro_dir))


def debug_nans(on: bool = True) -> None:
    """NaN/Inf checks (also ``LAZYJIT_DEBUG_NANS=1``): each sync checks what it
    computed; when a NaN or Inf appears it raises ``RuntimeError`` naming the
    op that first made it, the line that recorded it and its inputs' statistics
    (the tensors keep the computed values)."""
    _C.debug_nans(bool(on))


def start_trace(path) -> None:
    """Records a trace (also ``LAZYJIT_TRACE=<file.json>``): Chrome trace-event
    JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open, with what
    each thread did: record (per op), cache key, cache hit or miss (and why),
    compile (per program and per kernel), execute (per kernel and library step),
    each sync with its reason and line. ``path`` is created now (``RuntimeError``
    when it cannot be written, or is not a regular file: a FIFO, a device, a
    directory); a trace already running is written out first.
    The file is written by ``stop_trace()``, or at exit."""
    _C.start_trace(os.fspath(path))


def stop_trace() -> None:
    """Writes the trace started by ``start_trace`` and stops recording."""
    _C.stop_trace()


class trace:
    """``with lazyjit.trace("out.json"):`` traces the region; on leaving it,
    what the region recorded is run (``sync()``, unless it raised), so its
    compiles and steps are in the file, then the file is written."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        start_trace(self.path)
        return self

    def __exit__(self, exc_type, *exc):
        try:
            if exc_type is None:
                sync()  # a class, not a generator: the sync's call site is the with statement
        finally:
            stop_trace()
        return False


def _dims(dim):
    return [dim] if isinstance(dim, int) else list(dim)


def mark_dynamic(t: torch.Tensor, dim) -> None:
    """Graphs that read ``t`` get shape-generic kernels from their first compile.

    Use it for an input whose size you know will change (a batch, a sequence):
    without it (``LAZYJIT_DYNAMIC=auto``) a kernel is first compiled for its exact
    sizes and made generic when a second size comes. ``dim`` (an int or a list)
    is checked against ``t``; the choice applies to the whole graph.
    """
    for d in _dims(dim):
        _C.mark_dynamic(t, d)


def mark_static(t: torch.Tensor, dim) -> None:
    """Graphs that read ``t`` get kernels for their exact sizes only."""
    for d in _dims(dim):
        _C.mark_static(t, d)


from . import device_module  # noqa: E402  torch.lazyjit (python/lazyjit/device_module.py)

if not hasattr(torch, "lazyjit"):
    torch._register_device_module("lazyjit", device_module)
    torch.set_autocast_dtype("lazyjit", torch.get_autocast_dtype("cpu"))
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True,
                                                         for_packed_sequence=True, for_storage=True)

from . import _pickle  # noqa: E402,F401  pickle and multiprocessing queues carry lazyjit tensors (_pickle.py)


def _patch_printing():
    # Printing formats the elements on the CPU: one sync, instead of the dozens
    # of small ops (and .item() calls) the formatter would otherwise trace.
    import torch._tensor_str as ts

    orig = ts._tensor_str

    def _tensor_str(self, indent):
        if self.device.type == "lazyjit":
            self = self.to("cpu")
        return orig(self, indent)

    ts._tensor_str = _tensor_str


_patch_printing()


def _keep_parameter(old, new):
    """Makes the Parameter object `old` hold `new`'s tensor (and grad), keeping
    old's Python attributes; False when PyTorch cannot swap them (a weakref to
    one of them, another owner of its C++ tensor)."""
    if type(old) is not type(new):
        return False
    attrs = dict(old.__dict__)
    try:
        torch.utils.swap_tensors(old, new)
    except Exception:
        return False
    old.__dict__.update(attrs)
    return True


def _patch_module_apply():
    # Module.to(device) keeps a Parameter object only when the new tensor can be
    # shallow-copied into the old one (`param.data = new`), which PyTorch allows
    # for CPU/CUDA/... but not for an out-of-tree device. Without this patch,
    # `module.to("lazyjit")` would make new Parameter objects: a reference taken
    # before (an optimizer's, `w = emb.weight`) would keep the CPU tensor and
    # never see a gradient, and each module sharing a Parameter would get its
    # own copy, silently untying e.g. GPT-2's lm_head and embedding. After the
    # conversion, each old Parameter takes its new tensor's place by
    # torch.utils.swap_tensors (what Module._apply itself does under
    # torch.__future__.set_swap_module_params_on_conversion(True)); only moves
    # to or from lazyjit, other conversions are PyTorch's own. Where a swap is
    # impossible the new Parameter stays. Then whatever was shared before is
    # tied again.
    Module = torch.nn.Module
    orig = Module._apply
    depth = [0]

    def _apply(self, fn, recurse=True):
        if depth[0] or not recurse:
            return orig(self, fn, recurse)
        shared, before = {}, {}
        for mod in self.modules():
            for kind in ("_parameters", "_buffers"):
                for name, t in getattr(mod, kind).items():
                    if t is not None:
                        shared.setdefault(id(t), []).append((mod, kind, name))
                        before[id(t)] = t
        depth[0] += 1
        try:
            out = orig(self, fn, recurse)
        finally:
            depth[0] -= 1
        if not torch.__future__.get_overwrite_module_params_on_conversion():
            for key, places in shared.items():
                mod0, kind0, name0 = places[0]
                old, new = before[key], getattr(mod0, kind0)[name0]
                if (kind0 == "_parameters" and new is not old and new is not None
                        and "lazyjit" in (old.device.type, new.device.type) and _keep_parameter(old, new)):
                    getattr(mod0, kind0)[name0] = old
        for places in shared.values():
            if len(places) < 2:
                continue
            mod0, kind0, name0 = places[0]
            first = getattr(mod0, kind0)[name0]
            for mod, kind, name in places[1:]:
                if getattr(mod, kind)[name] is not first:
                    getattr(mod, kind)[name] = first
        return out

    Module._apply = _apply


_patch_module_apply()


def _on_lazyjit(gm, inputs) -> bool:
    """Whether a graph Dynamo captured touches the lazyjit device: through its
    inputs, parameters or buffers, or through a tensor it makes there (its
    nodes' example values: flex attention's compiled block-mask builder takes
    only sizes and makes its tensors with device="lazyjit")."""
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    tensors += list(gm.parameters()) + list(gm.buffers()) if isinstance(gm, torch.nn.Module) else []
    if any(t.device.type == "lazyjit" for t in tensors):
        return True
    graph = getattr(gm, "graph", None)
    for n in graph.nodes if graph is not None else ():
        v = n.meta.get("example_value", n.meta.get("val"))
        for t in v if isinstance(v, (list, tuple)) else (v,):
            if isinstance(t, torch.Tensor) and t.device.type == "lazyjit":
                return True
    return False


def _patch_torch_compile():
    # torch.compile's default backend, Inductor, generates code per device and has
    # none for "lazyjit" (it fails with "LoweringException: AssertionError"). A
    # graph captured by Dynamo on lazyjit tensors is lazyjit's to compile: its ops
    # run on the lazyjit device (recorded, fused and compiled at the next sync), as
    # the "eager" backend would run them. Graphs on other devices still go to Inductor.
    Wrapper = torch._TorchCompileInductorWrapper
    orig = Wrapper.__call__

    def __call__(self, model_, inputs_):
        if _on_lazyjit(model_, inputs_):
            return model_.forward
        return orig(self, model_, inputs_)

    Wrapper.__call__ = __call__


_patch_torch_compile()
