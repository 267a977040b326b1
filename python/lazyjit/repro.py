"""Reruns a compiled-vs-eager repro: ``python -m lazyjit.repro DIR``.

``lazyjit.check_graphs()`` (or ``LAZYJIT_CHECK=1``) writes DIR when generated
code and eager disagree on an op: the graph (``graph.bin``, ``graph.txt``), its
inputs, the switches that made the code (``env.txt``) and the report. This
compiles the graph afresh with those switches, runs the check again and says
whether the mismatch reproduces. Exit status: 1 reproduced, 0 compiled and
eager agree now, 2 a bad directory.
"""
import os
import sys


def _env(directory):
    env = {}
    with open(os.path.join(directory, "env.txt")) as f:
        for line in f:
            name, sep, value = line.rstrip("\n").partition("=")
            if sep:
                env[name] = value
    return env


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    directory = argv[0]
    try:
        want = _env(directory)
    except OSError as e:
        print(f"lazyjit.repro: {directory} is not a repro directory: {e}", file=sys.stderr)
        return 2
    # lazyjit reads its switches once, when it loads: set them, then start afresh.
    if any(os.environ.get(k) != v for k, v in want.items()):
        env = dict(os.environ, **want)
        os.execve(sys.executable, [sys.executable, "-m", "lazyjit.repro", directory], env)
    from lazyjit import _C
    try:
        report = _C.run_repro(directory)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 2
    if not report:
        print(f"lazyjit.repro: no mismatch: compiled and eager agree on every op of {directory}")
        return 0
    print(f"lazyjit.repro: reproduced: {report}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
