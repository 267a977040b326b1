"""bench/warm_start.py's table: the first step (background compile on) and the step
with its compile (background off) as two columns, counts from both modes shown once
when they agree; the notes below a `<!-- notes -->` line survive a regeneration."""
import importlib.util
import sys
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "warm_start.py"
_spec = importlib.util.spec_from_file_location("lazyjit_bench_warm_start", _SCRIPT)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench
_spec.loader.exec_module(bench)


def _r(ms, **kw):
    base = {k: 0 for k in bench.COUNTERS}
    return {"first_step_ms": ms, **base, **kw}


def test_render_two_columns_and_notes():
    rows = {("mlp", "eager"): {"on": [{"first_step_ms": 5.0}]},
            ("mlp", "lazyjit cold"): {"on": [_r(1.5, llvm_compiles=2, background_syncs=1)],
                                      "off": [_r(40.0, llvm_compiles=2)]},
            ("mlp", "lazyjit Redis-warm"): {"on": [_r(3.0, remote_hits=1, remote_ms=0.5)],
                                            "off": [_r(3.5, remote_hits=1, remote_ms=0.5)]}}
    meta = {"date": "d", "host": "h", "load_start": "1 1 1", "load_end": "2 2 2", "builds": ["b"]}
    md = bench.render(rows, 1, meta, notes="kept\n")
    assert "| mlp | eager | 5.0 | – |" in md
    assert "| mlp | lazyjit cold | 1.5 | 40.0 | 2 | 1 / 0 | 0 | – | 0 | – | – |" in md
    assert "| mlp | lazyjit Redis-warm | 3.0 | 3.5 | 0 | 0 | 0 | 1 | 0 | 0 | 0.5 |" in md
    assert md.endswith(bench.NOTES_MARK + "\nkept\n")
