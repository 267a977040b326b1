"""examples/diffusers_pipeline.py, the articles' recipe (pipe.to("lazyjit"),
pipe.transformer.compile(backend="lazyjit", fullgraph=True, dynamic=False)),
runs and its images equal eager's. Inductor is left to the example's own
runs: its compile alone takes a minute on two cores."""
import os
import subprocess
import sys


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_pipeline_recipe_matches_eager():
    r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "diffusers_pipeline.py"), "--calls", "1",
                        "--systems", "eager,lazyjit"], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "LAZYJIT_CACHE": "off"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[2:]}
    assert set(rows) == {"eager", "lazyjit"}, r.stdout
    assert float(rows["lazyjit"][5]) <= 1e-4, r.stdout  # max |image - eager|
