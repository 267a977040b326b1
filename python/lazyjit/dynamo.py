"""torch.compile(model, backend="lazyjit").

Dynamo captures the Python; AOTAutograd turns its graph into ATen graphs (a
forward and a backward when something needs gradients, one inference graph
otherwise). Each of those graphs is run once on lazyjit placeholder tensors,
which records it as a lazyjit graph (the same recording as on the device), and
becomes one lazyjit program through the same passes, kernels and compile cache
as a sync's (tracer/capture.h). After that a call binds the CPU tensors it is
given straight to the program's inputs and returns its outputs: no per-op
recording, no copies. Under LAZYJIT_TARGET=cuda the same holds for CUDA
tensors: the program's kernels run on the GPU, and its outputs are CUDA tensors.

- Sizes: a program serves the sizes, strides and ints it was captured with. A
  call with others (Dynamo's dynamic dims: an int argument and tensors of
  another size) is captured again; its kernels are shape-generic, so a new size
  costs a trace and a plan, not LLVM compiles (lazyjit.metrics()["llvm_compiles"]).
  A graph keeps up to MAX_CAPTURES captures, found by a hash of the call's
  sizes (tracer/capture_set.h): a decode step's KV cache grows a token per
  call, and every generate after the first finds all its sizes captured.
- A graph lazyjit cannot capture (an op that needs a value while recording, such
  as .item()) runs through ATen op by op, as Dynamo gave it: it never fails
  because of lazyjit. stats() counts those and says why.
- Tensors already on the lazyjit device (model.to("lazyjit") then
  torch.compile) run the same captured program, on their data: a call runs what
  the thread recorded before it (one sync, only when something is pending, so
  the program reads eager's values in eager's order), binds each lazyjit
  tensor's elements as it binds a CPU tensor, and returns lazyjit tensors that
  own the program's results (or view an argument the result is a view of). No
  op of the graph is recorded (lazyjit.metrics()["ops_traced"] does not grow);
  in-place updates of arguments land in their storages. A graph that cannot be
  captured is recorded op by op on the device, as without torch.compile, and
  stats() says why.

The backend is registered with Dynamo through the `torch_dynamo_backends` entry
point (pyproject.toml), so torch.compile finds it without `import lazyjit`.
"""
import contextlib
import copy
import functools
import re
import struct
import warnings

import torch
import torch.fx

from . import _C
from ._aliased_outputs import (_graph_outputs, _input_views, _output_geometry, _returned_arguments,
                               _returning_arguments, _values, _ViewsOfInputs)

__all__ = ["backend", "stats", "reset_stats"]

_stats = {"graphs": 0, "captures": 0, "calls": 0, "device_calls": 0, "eager_graphs": 0,
          "shared_memory_calls": 0, "eager_reasons": []}
_SHARED = object()  # _run_captured: arguments share memory the program writes


def stats() -> dict:
    """Counters of the backend: `graphs` (ATen graphs handed to lazyjit),
    `captures` (graph captures; a graph is captured again for sizes it was not
    captured with), `calls` (runs of captured programs), `device_calls` (those
    of them on lazyjit tensors), `eager_graphs` (graphs
    run through ATen because they could not be captured), `shared_memory_calls`
    (calls run through ATen because an argument the graph writes shares memory
    with another one, views of one buffer, where the graph was captured for
    arguments that shared none) and `eager_reasons`."""
    out = dict(_stats)
    out["eager_reasons"] = list(_stats["eager_reasons"])
    return out


def reset_stats() -> None:
    for k in _stats:
        _stats[k] = [] if k == "eager_reasons" else 0


# Captures kept per graph, the least recently used dropped past it: as many
# as the programs the runtime keeps (LAZYJIT_MAX_PROGRAMS' default), so a
# generate of up to 256 tokens finds every step captured on its next call. A
# capture of a 4-layer Llama's decode step holds about 1 MiB.
MAX_CAPTURES = 256

_LAZY = torch.device("lazyjit", 0)
_SITE = re.compile(r'File "([^"]+)", line (\d+)')


@functools.lru_cache(maxsize=None)
def _home() -> str:
    """The device type whose tensors a capture runs on: where lazyjit runs its
    programs, as the target's backend says ("cpu", or "cuda" under
    LAZYJIT_TARGET=cuda)."""
    return _C.data_device_type()


def _on_lazyjit(x):
    if isinstance(x, torch.device):
        return _LAZY if x.type == _home() else x
    return x


def _str_on_lazyjit(x):
    if isinstance(x, str) and x.split(":")[0] == _home():
        return _LAZY
    return _on_lazyjit(x)


def _lazy_module(gm: torch.fx.GraphModule):
    """`gm` for recording: factory ops (device=cpu; device=cuda under the CUDA
    target) and moves there stay on lazyjit, and the tensors it reads as attributes (an optimizer's parameters
    and state, constants) become extra arguments after its own, so that each call
    binds them as they are then and in-place updates reach them. Returns the
    module and those tensors."""
    graph = copy.deepcopy(gm.graph)
    out = torch.fx.GraphModule(gm, graph)
    attrs = []
    last_placeholder = None
    for node in graph.nodes:
        if node.op == "placeholder":
            last_placeholder = node
    for node in list(graph.nodes):
        if node.op == "call_method" and node.target == _home():  # x.cpu() (x.cuda()): stays on lazyjit while recorded
            node.target, node.args = "to", (node.args[0], _LAZY)
        elif node.op in ("call_function", "call_method"):  # torch.ones(..., device=cpu), x.to("cpu")
            to = _str_on_lazyjit if node.target == "to" else _on_lazyjit
            node.args = torch.fx.node.map_aggregate(node.args, to)
            node.kwargs = {k: (_str_on_lazyjit(v) if k == "device" else torch.fx.node.map_aggregate(v, _on_lazyjit))
                           for k, v in node.kwargs.items()}
        elif node.op == "get_attr":
            value = out
            for part in node.target.split("."):
                value = getattr(value, part)
            if isinstance(value, torch.Tensor):
                if last_placeholder is None:
                    with graph.inserting_before(next(iter(graph.nodes))):
                        arg = graph.placeholder(f"_lazyjit_attr_{len(attrs)}")
                else:
                    with graph.inserting_after(last_placeholder):
                        arg = graph.placeholder(f"_lazyjit_attr_{len(attrs)}")
                last_placeholder = arg
                node.replace_all_uses_with(arg)
                graph.erase_node(node)
                attrs.append(value)
    out.recompile()
    return out, attrs


def _output_devices(gm: torch.fx.GraphModule) -> list:
    """Per output of `gm`, the device type of its example value (None when it
    has none)."""
    devices = []
    for o in _graph_outputs(gm):
        v = _values(o)[0] if isinstance(o, torch.fx.Node) else o
        devices.append(v.device.type if isinstance(v, torch.Tensor) else None)
    return devices


def _site(gm: torch.fx.GraphModule, kind: str) -> str:
    """Names the graph in the metrics and recompile explanations, with Dynamo's
    compile id (as TORCH_LOGS prints it) and the user's code it comes from:
    "torch.compile [0/1] forward at model.py:12"."""
    compile_id = gm.meta.get("dynamo_compile_id")
    try:
        compile_id = compile_id or torch._guards.CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001
        pass
    name = f"torch.compile [{compile_id}] {kind}" if compile_id else f"torch.compile {kind}"
    for node in gm.graph.nodes:
        found = _SITE.findall(node.meta.get("stack_trace") or "")
        if found:
            return f"{name} at {found[-1][0]}:{found[-1][1]}"
    try:  # no stack traces recorded: the first code Dynamo traced outside torch
        context = torch._guards.TracingContext.try_get()
        torch_dir = torch.__file__.rsplit("/", 1)[0] + "/"
        for code in getattr(context, "traced_code", None) or []:
            if not code.co_filename.startswith(torch_dir):
                return f"{name} at {code.co_filename}:{code.co_firstlineno}"
    except Exception:  # noqa: BLE001 - a name is all this is for
        pass
    return name


def _arg_key(a):
    """What must equal for a captured program to serve an argument that is not a
    tensor (the C++ side reads the same): ints and floats by value."""
    if isinstance(a, bool):
        return int(a)
    if isinstance(a, int):
        return a
    if isinstance(a, float):
        return struct.unpack("q", struct.pack("d", a))[0]
    return None


class LazyjitGraph:
    """An AOT graph compiled by lazyjit: called with the graph's arguments as a
    list (AOTAutograd's boxed convention), returns its outputs."""

    def __init__(self, gm: torch.fx.GraphModule, kind: str, dynamic: bool):
        # An instance attribute: the wrappers AOTAutograd puts around a backward
        # copy the callable's __dict__, and look for it there.
        self._boxed_call = True
        self.gm = gm
        self.kind = kind
        self.dynamic = dynamic
        self.site = _site(gm, kind)
        self.lazy_gm, self.attrs = _lazy_module(gm)
        # A graph that makes tensors on the device is not captured for the CPU even
        # when no argument is on the device (factories only: Llama's causal mask in
        # a graph of its own); without a device argument ATen runs it, as eager would.
        self.makes_lazyjit = any(isinstance(v, torch.Tensor) and v.device.type == "lazyjit"
                                 for n in gm.graph.nodes for v in _values(n))
        # Per output, the device type Dynamo expects it on (None: unknown), so
        # that a call on lazyjit tensors returns lazyjit tensors where eager would.
        self.out_devices = _output_devices(gm)
        # Whether its arguments are lazyjit tensors (Dynamo guards on their
        # devices): True, False, or None when the graph does not say.
        devices = {v.device.type for n in gm.graph.nodes if n.op == "placeholder"
                   for v in _values(n) if isinstance(v, torch.Tensor)}
        self.on_device = True if "lazyjit" in devices else (False if devices else None)
        # No output that eager gives on the CPU (a .cpu() in the graph): every
        # tensor a call on the device returns is a lazyjit tensor.
        self.lazy_outputs = _home() not in self.out_devices
        self.programs = _C.CaptureSet(MAX_CAPTURES)
        # Per capture (its tag in self.programs), how its outputs map to the
        # function's: None when every output is the program's, in order.
        self.templates = {}
        self._next_tag = 0
        self.eager_reason = None
        _stats["graphs"] += 1

    def __call__(self, args):
        on_device = self.on_device
        if on_device is None:
            on_device = any(isinstance(a, torch.Tensor) and a.device.type == "lazyjit" for a in args)
        if self.eager_reason is None:
            full = list(args) + self.attrs if self.attrs else args
            if on_device:
                if self.lazy_outputs:  # the warm call: one C++ call binds, runs and wraps
                    hit = self.programs.run_on_device(full)
                    if hit:
                        tag, out = hit
                        _stats["calls"] += 1
                        _stats["device_calls"] += 1
                        template = self.templates[tag]
                        return out if template is None else [out[t] if k else t for k, t in template]
                out = self._call_on_device(full)
                return self._record(args) if out is None else out
            out = self._run_captured(full)
            if out is _SHARED:
                return list(self.gm(*args))
            if out is not None:
                return out
            if not self.makes_lazyjit and all(a.device.type == _home() for a in full if isinstance(a, torch.Tensor)):
                p = self._capture(full)
                if p is not None:
                    graph, template = p
                    tag, self._next_tag = self._next_tag, self._next_tag + 1
                    self.templates[tag] = template
                    self.templates.pop(self.programs.add(graph, tag), None)
                    out = self._run_captured(full)
                    if out is not None and out is not _SHARED:
                        return out
        if on_device:
            return self._record(args)
        return list(self.gm(*args))

    def _record(self, args):
        """The graph recorded op by op on the device, synced as usual (a graph
        that could not be captured, or a call it cannot serve)."""
        return list(self.lazy_gm(*args, *(t if t.device.type == "lazyjit" else t.to(_LAZY) for t in self.attrs)))

    def _call_on_device(self, full):
        """A call on lazyjit tensors: the captured program on their data, its
        results as lazyjit tensors; None when the graph runs recorded instead."""
        data = _C.data_views(full)
        if not all(a.device.type == _home() for a in data if isinstance(a, torch.Tensor)):
            return None  # tensors of another device among the arguments: recorded, as eager mixes them
        out = self._run_captured(data)
        if out is None:
            p = self._capture(data)
            if p is None:
                return None
            graph, template = p
            tag, self._next_tag = self._next_tag, self._next_tag + 1
            self.templates[tag] = template
            self.templates.pop(self.programs.add(graph, tag), None)
            out = self._run_captured(data)
        if out is None or out is _SHARED:
            return None
        _stats["device_calls"] += 1
        devices = self.out_devices
        wrap = [i for i, o in enumerate(out) if isinstance(o, torch.Tensor) and o.device.type == _home()
                and (i >= len(devices) or devices[i] != _home())]
        if wrap:
            lazy = _C.lazy_results([out[i] for i in wrap], full, data)
            for i, t in zip(wrap, lazy):
                out[i] = t
        return out

    def _run_captured(self, args):
        hit = self.programs.run(args)
        if hit is None:
            return None
        if hit is False:
            # A capture fits, but an argument it writes shares memory with
            # another (views of one buffer): its program would read the other
            # before the write. ATen runs the graph, as eager would.
            _stats["shared_memory_calls"] += 1
            return _SHARED
        tag, out = hit
        _stats["calls"] += 1
        template = self.templates[tag]
        return out if template is None else [out[t] if k else t for k, t in template]

    def _capture(self, args):
        _stats["captures"] += 1
        # Random ops draw while the graph is recorded, and again on each run: the
        # generator is put back, so that the first call draws what eager would.
        # The draws are the generator of where data lives (the current GPU's
        # under the CUDA target; tracer/api.cpp), so that is the one put back.
        gen = _C.data_generator()
        rng = gen.get_state()
        cap = _C.Capture()
        try:
            placeholders = []
            for a in args:
                if isinstance(a, torch.Tensor):
                    placeholders.append(cap.placeholder(a))
                else:
                    cap.other_arg(_arg_key(a))
                    placeholders.append(a)
            with torch.no_grad(), _LAZY:  # factories without a device make lazyjit tensors
                outs = list(self.lazy_gm(*placeholders))
            lazy, template = [], []
            for o in outs:
                if isinstance(o, torch.Tensor) and o.device.type == "lazyjit":
                    template.append((True, len(lazy)))
                    lazy.append(o)
                else:
                    template.append((False, o))
            graph = cap.finish(lazy, self.site, self.dynamic)
        except Exception as e:  # noqa: BLE001 - whatever it was, ATen runs the graph
            why = str(e).splitlines()[0] if str(e) else ""
            # Raised by the capture's strict region (tracer/capture.h).
            sync = re.search(r"an implicit sync in a strict region \((.*?)\)(?: at [^;]*)?;", why)
            eager = re.search(r"lazyjit\.strict: (\S+) would run eagerly in a strict region \((.*?)\)", why)
            if sync:
                why = f"an op needs a tensor's value while the graph is recorded ({sync.group(1)})"
            elif eager:
                why = (f"an op needs a tensor's value while the graph is recorded ({eager.group(1)} "
                       f"runs eagerly: {eager.group(2)})")
            else:
                why = f"{type(e).__name__}: {why}"
            self.eager_reason = why
            _stats["eager_graphs"] += 1
            _stats["eager_reasons"].append(f"{self.site}: {self.eager_reason}")
            warnings.warn(f"lazyjit: {self.site} runs through ATen op by op, uncompiled: {self.eager_reason}",
                          stacklevel=2)
            return None
        finally:
            cap.close()
            gen.set_state(rng)
        in_order = all(k and t == i for i, (k, t) in enumerate(template)) and len(template) == len(lazy)
        return graph, (None if in_order else template)


def _compiler(kind, geometry=None):
    def compile_graph(gm, example_inputs):
        graph = LazyjitGraph(gm, kind, _is_dynamic(example_inputs))
        views = _input_views(gm, geometry) if kind != "backward" else []
        return _ViewsOfInputs(graph, views) if views else graph

    return compile_graph


def _is_dynamic(example_inputs) -> bool:
    return any(isinstance(x, torch.SymInt) for x in example_inputs) or any(
        isinstance(s, torch.SymInt) for x in example_inputs if isinstance(x, torch.Tensor) for s in x.shape)


def _shares_memory(inputs) -> bool:
    """Whether two tensor inputs are views of one storage."""
    seen = set()
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.layout == torch.strided and x.device.type != "meta":
            try:
                key = (x.device, x.untyped_storage().data_ptr(), x.untyped_storage().nbytes())
            except Exception:  # noqa: BLE001 - no storage to share (a tensor subclass)
                continue
            if key[1] == 0:
                continue
            if key in seen:
                return True
            seen.add(key)
    return False


def _forget_current_stream(gm: torch.fx.GraphModule) -> None:
    """With an accelerator registered (lazyjit is one, to PyTorch), Dynamo
    registers the current stream with every frame it traces, and the frame's
    code then stores it before each call of the graph: 6-7 us per call, a third
    of a small graph's. lazyjit has one stream and its graphs never read it;
    unless this graph has stream ops, the registration is dropped before Dynamo
    writes the frame's code."""
    try:
        from torch._dynamo import graph_bytecode_inputs as objs
    except ImportError:
        return
    for node in gm.graph.nodes:
        if node.op == "call_function" and "streams" in str(getattr(node.target, "namespace", "")):
            return
    objs.reset_user_object_tracking()


def _skip_overhead_ranges() -> None:
    """Dynamo wraps the argument handling before each call of a graph (and
    AOTAutograd its runtime wrapper) in profiler ranges, through two more
    Python calls per call whether a profiler runs or not: 1.5-2 us, a sixth of
    a small graph's call on lazyjit. For the frame being compiled now, unless a
    profiler is on, lazyjit's graph is called without them; Dynamo's setting is
    put back when the frame's compile ends, so other backends' frames keep it."""
    from torch._dynamo import config as dynamo_config

    if not getattr(dynamo_config, "record_runtime_overhead", False):
        return
    if torch.autograd.profiler._is_profiler_enabled:
        return
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:
        return
    dynamo_config.record_runtime_overhead = False

    def restore(_args):
        dynamo_config.record_runtime_overhead = True
        callback_handler.remove_end_callback(restore)

    callback_handler.register_end_callback(restore)


def backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The `lazyjit` backend of torch.compile."""
    from torch._dynamo.backends.common import aot_autograd

    _forget_current_stream(gm)
    _skip_overhead_ranges()

    # No gradient can flow through the graph (Dynamo guards on grad mode and on
    # its inputs' requires_grad, so it is only called so): Dynamo's graph itself
    # is captured, its torch calls recorded as ATen ops on the placeholders, with
    # no AOTAutograd between the call and the program (3-4 us less per call).
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)
    # A graph that reads a Python number through .item() (Dynamo makes a float
    # argument a 0-d tensor) goes through AOTAutograd, which turns those reads into
    # tensor ops: recorded as it is, .item() would need a value.
    reads_item = any(n.op == "call_method" and n.target == "item" for n in gm.graph.nodes)
    # Arguments that share memory (views of one buffer) go through AOTAutograd,
    # which makes them views of one synthetic base inside the graph, so that a
    # write through one is seen through the others (as eager would).
    if (not kwargs and not needs_grad and not reads_item and not _shares_memory(example_inputs)
            and not any(n.op == "call_module" for n in gm.graph.nodes)):
        graph = LazyjitGraph(gm, "inference", _is_dynamic(example_inputs))

        def run(*args):
            return graph(list(args))

        return run
    shared = _shares_memory(example_inputs)
    with contextlib.ExitStack() as stack:
        if shared:
            # Views of a synthetic base: AOTAutograd would replay an output's
            # views, recorded on the argument, on the base (y.diagonal() of a 2-d
            # y on a 1-d base raises IndexError, under aot_eager too); it takes
            # the output's geometry instead, which _ViewsOfInputs gives.
            from torch._functorch import config as functorch_config

            stack.enter_context(functorch_config.patch(view_replay_for_aliased_outputs=False))
        geometry = _output_geometry(gm)
        compiled = aot_autograd(fw_compiler=_compiler("forward", geometry), bw_compiler=_compiler("backward"),
                                inference_compiler=_compiler("inference", geometry),
                                keep_inference_input_mutations=True)(gm, example_inputs, **kwargs)
    # AOTAutograd returns an argument that shares memory with another as a view
    # of their synthetic base; eager returns the argument itself.
    returned = _returned_arguments(gm) if shared else []
    return _returning_arguments(compiled, returned) if returned else compiled
