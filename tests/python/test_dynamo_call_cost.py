"""What Dynamo puts around each call of a graph lazyjit compiled
(python/lazyjit/dynamo.py): nothing a call does not need. Read from the code
Dynamo writes for the frame, so that it holds whatever the machine's load."""
import dis

import pytest
import torch

import lazyjit  # noqa: F401 - registers the device
import lazyjit.dynamo
from torch._dynamo import config as dynamo_config
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

pytestmark = [pytest.mark.usefixtures("fresh_dynamo"),
              pytest.mark.skipif(not hasattr(dynamo_config, "record_runtime_overhead"),
                                 reason="this torch's Dynamo records no per-call profiler ranges")]


def names_called_before_the_graph(fn):
    """The names the frame's compiled code loads (globals and imports)."""
    names = set()
    for entry in _debug_get_cache_entry_list(fn.__code__):
        for ins in dis.get_instructions(entry.code):
            if ins.opname in ("LOAD_GLOBAL", "IMPORT_NAME", "IMPORT_FROM", "LOAD_ATTR"):
                names.add(str(ins.argval))
    assert names, "the frame was not compiled"
    return names


def scaled_sin(x, y):
    return torch.sin(x) * 2 + y


def scaled_cos(x, y):
    return torch.cos(x) * 2 + y


def test_a_lazyjit_graph_is_called_without_dynamos_profiler_ranges():
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    out = torch.compile(scaled_sin, backend="lazyjit")(x, y)
    torch.testing.assert_close(out, scaled_sin(x, y))
    assert lazyjit.dynamo.stats()["calls"] == 1
    names = names_called_before_the_graph(scaled_sin)
    assert "record_pregraph_bytecode_enter" not in names, sorted(names)
    # Dynamo's setting is back for the frames other backends compile.
    assert dynamo_config.record_runtime_overhead is True
    torch.compile(scaled_cos, backend="eager")(x, y)
    assert "record_pregraph_bytecode_enter" in names_called_before_the_graph(scaled_cos)


def test_under_a_profiler_the_ranges_stay():
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        out = torch.compile(scaled_sin, backend="lazyjit")(x, y)
    torch.testing.assert_close(out, scaled_sin(x, y))
    assert "record_pregraph_bytecode_enter" in names_called_before_the_graph(scaled_sin)
    assert dynamo_config.record_runtime_overhead is True


def test_on_the_device_too():
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    out = torch.compile(scaled_sin, backend="lazyjit")(x.to("lazyjit"), y.to("lazyjit"))
    torch.testing.assert_close(out.cpu(), scaled_sin(x, y))
    assert lazyjit.dynamo.stats()["device_calls"] == 1
    assert "record_pregraph_bytecode_enter" not in names_called_before_the_graph(scaled_sin)
