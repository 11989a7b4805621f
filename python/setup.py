"""setuptools hook of the pdkv package (metadata is in pyproject.toml).

At install time, writes ``pdkv/_install.py`` into the built package with the directory that
holds libpdkv then, so the installed package finds the library with no variable set:
``PDKV_LIB_DIR`` when set, else ``pkg-config --variable=libdir pdkv`` (an installed prefix: the
default pkg-config path covers /usr/local and /usr, ``PKG_CONFIG_PATH`` another prefix), else the
source checkout's ``build/release/capi`` when installing from a checkout that has one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Optional

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def install_lib_dir() -> Optional[str]:
    """The directory recorded in ``_install.py`` (None: nothing found; the package then relies on
    ``PDKV_LIB_DIR`` or the dynamic loader at run time)."""
    explicit = os.environ.get("PDKV_LIB_DIR")
    if explicit:
        return os.path.abspath(explicit)
    try:
        r = subprocess.run(
            ["pkg-config", "--variable=libdir", "pdkv"], capture_output=True, text=True, check=False
        )
    except OSError:  # no pkg-config
        r = None
    if r is not None and r.returncode == 0 and r.stdout.strip():
        return os.path.normpath(r.stdout.strip())
    checkout = HERE.parent / "build" / "release" / "capi"
    if (HERE.parent / "capi").is_dir() and checkout.is_dir():
        return str(checkout)
    return None


class BuildPyRecordingLibDir(build_py):
    """build_py that also writes ``pdkv/_install.py`` (never into the source tree)."""

    def run(self) -> None:
        super().run()
        lib_dir = install_lib_dir()
        target = Path(self.build_lib) / "pdkv" / "_install.py"
        target.write_text(
            '"""Written by setup.py when this package was built: where libpdkv was then."""\n\n'
            f"LIB_DIR = {lib_dir!r}\n"
        )
        print(f"pdkv: libpdkv directory recorded at install time: {lib_dir}")


setup(cmdclass={"build_py": BuildPyRecordingLibDir})
