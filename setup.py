"""Builds and installs the Python module `sluice` (python/) with pip, using
the project's CMake build for the extension (and the static libraries it
links, built position-independent). Debian 12, Debian's packages only:

    scripts/dev python          # makes a venv and runs the pip line below

or by hand, in a venv made with --system-site-packages (Debian's python3
refuses a bare `pip install`):

    python3 -m venv --system-site-packages ~/.local/share/sluice/venv
    ~/.local/share/sluice/venv/bin/pip install --no-build-isolation --no-index .

Needs g++, cmake, ninja-build, pkg-config, libisal-dev, libhiredis-dev,
python3-dev, pybind11-dev, python3-setuptools, python3-wheel (scripts/dev python installs them).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def version():
    m = re.search(r"project\(sluice VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    return m.group(1)


class CMakeBuild(build_ext):
    """Configures the project with only the store and the module, builds the
    module's target, and copies the extension where setuptools wants it."""

    def build_extension(self, ext):
        build = Path(self.build_temp).resolve() / "cmake"
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), *gen,
                        "-DCMAKE_BUILD_TYPE=Release", "-DSLUICE_WITH_PYTHON=ON",
                        "-DSLUICE_BUILD_TESTS=OFF", "-DSLUICE_BUILD_BENCH=OFF",
                        "-DSLUICE_BUILD_EXAMPLES=OFF", "-DSLUICE_BUILD_TOOLS=OFF",
                        "-DSLUICE_INSTALL=OFF", f"-DPython3_EXECUTABLE={sys.executable}"],
                       check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", str(build), "--target", "sluice_python", "-j", jobs],
                       check=True)
        built = sorted((build / "python" / "sluice").glob("_sluice*.so"))
        if not built:
            raise RuntimeError(f"the build made no _sluice*.so in {build}/python/sluice")
        dest = Path(self.get_ext_fullpath(ext.name))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[-1], dest)


setup(
    name="sluice",
    version=version(),
    description="Named, bounded, durable queues shared by processes (the sluice store)",
    license="MIT",
    python_requires=">=3.10",
    packages=["sluice"],
    package_dir={"": "python"},
    package_data={"sluice": ["__init__.pyi", "py.typed"]},
    ext_modules=[Extension("sluice._sluice", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
