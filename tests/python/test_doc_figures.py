"""Figures the README and docs/torch_compile.md quote come from a results file
of bench/: each ratio (1.91x, 0.90×) and time (46.3 µs, 27.3 ms) there sits in
a paragraph or table followed by `<!-- figures: bench/results/FILE -->`, and
the figure appears in that file. A new bench run that changes a figure fails
this test until the docs quote the new one."""
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKED = ["README.md", "docs/torch_compile.md"]  # every ratio in these must have a source
MARKER = re.compile(r"<!-- figures: (\S+) -->")
RATIO = re.compile(r"(?<![\w.])(\d+\.\d+)\s?[x×](?![\w])")
TIME = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?) ?(µs|ms)\b")


def _blocks(text):
    """(text of the paragraph or table above each marker, its source path), and
    the text outside every marked block."""
    blocks, rest = [], []
    paragraphs = re.split(r"\n\s*\n", text)
    for p in paragraphs:
        m = MARKER.search(p)
        if m:
            blocks.append((p[:m.start()], m.group(1)))
        else:
            rest.append(p)
    return blocks, "\n\n".join(rest)


def _normal(figure):
    return figure.replace("×", "x").replace(" ", "")


def _figures(text):
    return [f"{m.group(1)}x" for m in RATIO.finditer(text)] + [f"{m.group(1)}{m.group(2)}" for m in TIME.finditer(text)]


@pytest.mark.parametrize("doc", CHECKED)
def test_every_ratio_in_the_doc_names_its_results_file(doc):
    text = open(os.path.join(REPO, doc), encoding="utf-8").read()
    _, rest = _blocks(text)
    unsourced = [m.group(0) for m in RATIO.finditer(rest)]
    assert not unsourced, f"{doc} quotes {unsourced} with no <!-- figures: bench/results/... --> source"


@pytest.mark.parametrize("doc", CHECKED)
def test_each_quoted_figure_is_in_its_results_file(doc):
    text = open(os.path.join(REPO, doc), encoding="utf-8").read()
    blocks, _ = _blocks(text)
    for block, source in blocks:
        path = os.path.join(REPO, source)
        assert os.path.isfile(path), f"{doc} names {source}, which does not exist"
        results = _normal(open(path, encoding="utf-8").read())
        # Times in a results table are in ms: 46.3 µs is 0.0463 ms there.
        for fig in _figures(block):
            candidates = {fig}
            if fig.endswith("µs"):
                candidates.add(f"{float(fig[:-2]) / 1000:g}")
            if fig.endswith("ms"):
                candidates.add(fig[:-2])
            assert any(c in results for c in candidates), f"{doc} quotes {fig}; {source} does not have it"
