"""`pip install --no-build-isolation .` builds the C++ core and the extension with
CMake against the torch installed in the running Python, then packages them;
`pip wheel --no-build-isolation --no-deps .` makes a wheel of the same, and
`pip install --no-build-isolation -e .` (what scripts/build.sh does for .venv)
installs python/ in place."""
import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithCMake(build_py):
    def run(self):
        build = os.environ.get("LAZYJIT_BUILD_DIR", os.path.join(ROOT, "build"))
        if not os.path.exists(os.path.join(build, "build.ninja")):
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja",
                                   "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                                   f"-DLAZYJIT_PYTHON={sys.executable}"])
        subprocess.check_call(["ninja", "-C", build, f"-j{os.environ.get('LAZYJIT_JOBS', '2')}",
                               "lazyjit_python", "lazyjit-cache"])
        # The inspection tool ships inside the package; `lazyjit-cache` (a console
        # script, python/lazyjit_cache_cli.py) runs it.
        bindir = os.path.join(ROOT, "python", "lazyjit", "bin")
        os.makedirs(bindir, exist_ok=True)
        shutil.copy2(os.path.join(build, "lazyjit-cache"), os.path.join(bindir, "lazyjit-cache"))
        super().run()


class BinaryDistribution(Distribution):
    """The package holds a CPython extension and shared libraries built by CMake,
    not by setuptools: without this the wheel would be tagged py3-none-any."""

    def has_ext_modules(self):
        return True


setup(
    distclass=BinaryDistribution,
    packages=["lazyjit"],
    py_modules=["lazyjit_cache_cli", "lazyjit_autoload"],
    package_dir={"": "python"},
    package_data={"lazyjit": ["_C*.so", "lib/*.so", "bin/lazyjit-cache"]},
    cmdclass={"build_py": BuildWithCMake},
    zip_safe=False,
)
