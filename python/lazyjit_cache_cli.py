"""`lazyjit-cache`, the compile-cache inspection tool, as installed with the
package: runs the C++ binary shipped in lazyjit/bin/ (or, in a source checkout,
the one in build/). A module of its own, outside the lazyjit package, so that
the console script does not import lazyjit (and torch): it starts fast."""
import importlib.util
import os
import sys


def _binary() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.find_spec("lazyjit")  # locates the package without importing it
    pkg = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else here
    for path in (os.path.join(pkg, "bin", "lazyjit-cache"),
                 os.path.join(os.path.dirname(here), "build", "lazyjit-cache")):
        if os.access(path, os.X_OK):
            return path
    sys.exit("lazyjit-cache: the tool's binary is not built (run scripts/build.sh or pip install .)")


def main() -> None:
    binary = _binary()
    os.execv(binary, [binary] + sys.argv[1:])


if __name__ == "__main__":
    main()
