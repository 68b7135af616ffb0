"""pip install ./python: the zinf package with libzinf.so and the zinf program in
zinf/_bin/. They come from the zinf tree this folder sits in (built with make when
missing), or from the folder ZINF_BUILD names (a build variant's, e.g. build/nocuda;
relative to the zinf tree)."""
import os
import pathlib
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent.parent


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        build = ROOT / os.environ.get("ZINF_BUILD", "build")
        files = [build / "libzinf.so", build / "zinf"]
        if not all(f.exists() for f in files):
            if "ZINF_BUILD" in os.environ:
                raise SystemExit(f"zinf: {build} has no libzinf.so and zinf program: build that variant first")
            subprocess.run(["make", "-C", str(ROOT)], check=True)
        dest = pathlib.Path(self.build_lib) / "zinf" / "_bin"
        dest.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copy2(f, dest / f.name)


setup(cmdclass={"build_py": BuildWithLibrary})
