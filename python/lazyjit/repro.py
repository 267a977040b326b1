"""Reruns a compiled-vs-eager repro: ``python -m lazyjit.repro DIR``.

``lazyjit.check_graphs()`` (or ``LAZYJIT_CHECK=1``) writes DIR when generated
code and eager disagree on an op: the graph (``graph.bin``, ``graph.txt``), its
inputs, the switches that made the code (``env.txt``) and the report. This
compiles the graph afresh with those switches, runs the check again and says
whether the mismatch reproduces.

DIR is data, never instructions: env.txt may set only the switches a repro
carries (LAZYJIT_CACHE, LAZYJIT_FAULT, LAZYJIT_DISABLE_PASSES,
LAZYJIT_VECTOR_BITS, LAZYJIT_OPT_LEVEL, LAZYJIT_DYNAMIC), each to a value
lazyjit takes; a line setting a name that is not LAZYJIT_* (PYTHONPATH,
LD_PRELOAD, ...) is ignored, with a warning. Other switches come from your own
environment. lazyjit reads its switches when it loads, so the runner sets
env.txt's and re-executes itself, once at most.

Exit status: 0 compiled and eager agree now; 1 the mismatch reproduced; 2 not a
repro directory (a file missing or unreadable, graph.bin not a graph, an input
of the wrong size); 3 a malformed line in env.txt or scalars.txt (the message
names the file and line).
"""
import os
import sys

# runtime/debug_runs/repro.cpp's repro_switches(): the only names env.txt may set. The C++
# reader (lazyjit::run_repro) checks every line of env.txt and each value; this
# list only says which lines to set before lazyjit loads.
_SWITCHES = ("LAZYJIT_CACHE", "LAZYJIT_FAULT", "LAZYJIT_DISABLE_PASSES", "LAZYJIT_VECTOR_BITS",
             "LAZYJIT_OPT_LEVEL", "LAZYJIT_DYNAMIC")
# Set in the re-executed process only (not a LAZYJIT_* name: lazyjit's config
# would call it an unknown switch); the same name as lazyjit-repro's.
_REEXECUTED = "_LAZYJIT_REPRO_REEXECUTED"
BAD_DIRECTORY, MALFORMED = 2, 3


def _env(directory):
    """env.txt's switches to set, and the warnings for the lines set nothing."""
    path = os.path.join(directory, "env.txt")
    want, warnings = {}, []
    # Bytes as they are (surrogateescape): a value reaches the environment unchanged.
    with open(path, encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        for n, line in enumerate(f, 1):
            line = line[:-1] if line.endswith("\n") else line
            name, sep, value = line.partition("=")
            if not line or line.startswith("#") or not sep or "\0" in line:
                continue  # malformed lines: run_repro names them
            if not name.startswith("LAZYJIT_"):
                shown = "".join(chr(b) if 0x20 <= b < 0x7f else f"\\x{b:02x}"
                                for b in name.encode("utf-8", "surrogateescape"))
                warnings.append(f"lazyjit.repro: warning: {path}:{n}: {shown} is not a lazyjit switch; "
                                "ignored (a repro sets only its LAZYJIT_* switches)")
            elif name in _SWITCHES and name not in want:
                want[name] = value
    return want, warnings


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return BAD_DIRECTORY
    directory = argv[0]
    reexecuted = os.environ.pop(_REEXECUTED, None) is not None
    try:
        want, warnings = _env(directory)
    except OSError as e:
        print(f"lazyjit.repro: {directory} is not a repro directory: {e}", file=sys.stderr)
        return BAD_DIRECTORY
    if not reexecuted:
        for w in warnings:
            print(w, file=sys.stderr)
        # lazyjit reads its switches once, when it loads: set them, then start afresh, once.
        if any(os.environ.get(k) != v for k, v in want.items()):
            env = dict(os.environ, **want)
            env[_REEXECUTED] = "1"
            sys.stdout.flush()
            sys.stderr.flush()
            os.execve(sys.executable, [sys.executable, "-m", "lazyjit.repro", directory], env)
    from lazyjit import _C
    try:
        report = _C.run_repro(directory)
    except ValueError as e:  # runtime::MalformedRepro: a line of env.txt or scalars.txt
        print(e, file=sys.stderr)
        return MALFORMED
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return BAD_DIRECTORY
    if not report:
        print(f"lazyjit.repro: no mismatch: compiled and eager agree on every op of {directory}")
        return 0
    print(f"lazyjit.repro: reproduced: {report}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
