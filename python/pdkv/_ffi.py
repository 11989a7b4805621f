"""Low-level ctypes layer of pdkv: library discovery and the declared function table.

The C mirrors (handle types, structs, constants, every function's restype/argtypes) are generated
from ``capi/include/pdkv.h`` into :mod:`pdkv._raw` by ``scripts/gen_bindings.py`` and re-exported
here; this module only loads the library and declares them on it. The Pythonic API in the other
modules is built on it; application code should not need this module.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._raw import *  # noqa: F401,F403  (re-exported: the other modules reach the mirrors as _ffi.X)
from ._raw import FUNCTIONS, HEADER_VERSION_MAJOR

class LibraryLoadError(ImportError):
    """libpdkv could not be loaded; the message lists every place that was tried and why it failed."""

    def __init__(self, attempts: Sequence[Tuple[str, str]]) -> None:
        #: (where, why it failed) for each candidate, in search order.
        self.attempts: Tuple[Tuple[str, str], ...] = tuple(attempts)
        lines = ["could not load libpdkv; tried:"]
        lines += [f"  - {where}: {why}" for where, why in self.attempts]
        lines.append(
            f"set PDKV_LIB_DIR to the directory holding {library_file_name()} (e.g. <prefix>/lib or build/release/capi)"
        )
        super().__init__("\n".join(lines))


# ---- Library discovery ---------------------------------------------------------------------

_PACKAGE_DIR = Path(__file__).resolve().parent
#: The repository root when the package runs from a source checkout (python/pdkv/ -> repo).
_REPO_ROOT = _PACKAGE_DIR.parent.parent


def library_file_name() -> str:
    """The file name looked for: the library's SONAME, one per ABI major version (``libpdkv.so.2``)."""
    return f"libpdkv.so.{HEADER_VERSION_MAJOR}"


def _installed_lib_dir() -> Optional[str]:
    """The directory recorded when this package was installed (``pdkv/_install.py``, written by
    ``setup.py``), or None: running from a source checkout, or nothing was found then."""
    try:
        from . import _install  # type: ignore[attr-defined]  # generated at install time
    except ImportError:
        return None
    value = getattr(_install, "LIB_DIR", None)
    return value if isinstance(value, str) and value else None


def library_candidates(
    environ: Optional[Dict[str, str]] = None, installed_lib_dir: Optional[str] = None
) -> List[Tuple[str, Optional[str]]]:
    """The places libpdkv is looked for, in order, as (description, path or None).

    1. ``$PDKV_LIB_DIR/libpdkv.so.2``: ``PDKV_LIB_DIR`` is the one variable every pdkv binding
       reads (Rust, Python), the directory holding the library;
    2. ``libpdkv.so.2`` next to this package (a package shipped with its library);
    3. the directory recorded at install time (``PDKV_LIB_DIR`` when ``pip install`` ran, else
       ``pkg-config --variable=libdir pdkv``, else the checkout's ``build/release/capi``);
    4. ``build/release/capi`` of the source checkout this package sits in, if any;
    5. ``libpdkv.so.2`` through the dynamic loader's own search (``LD_LIBRARY_PATH``,
       ``ldconfig``'s cache, the system directories).

    ``environ`` and ``installed_lib_dir`` default to the process environment and the recorded
    directory; they are parameters so that the order can be tested.
    """
    env = os.environ if environ is None else environ
    name = library_file_name()
    installed = _installed_lib_dir() if installed_lib_dir is None else installed_lib_dir or None
    out: List[Tuple[str, Optional[str]]] = []
    explicit = env.get("PDKV_LIB_DIR")
    out.append(("$PDKV_LIB_DIR", os.path.join(explicit, name) if explicit else None))
    out.append(("next to the package", str(_PACKAGE_DIR / name)))
    out.append(("the directory recorded at install time", os.path.join(installed, name) if installed else None))
    checkout = _REPO_ROOT / "build" / "release" / "capi"
    out.append(("source checkout build", str(checkout / name) if (_REPO_ROOT / "capi").is_dir() else None))
    out.append(("the dynamic loader", name))
    return out


#: Why a candidate of :func:`library_candidates` names no path.
_NO_PATH_REASONS = {
    "$PDKV_LIB_DIR": "not set",
    "the directory recorded at install time": "none recorded (pip install found no pdkv through pkg-config)",
    "source checkout build": "not running from a source checkout",
}


def load_library(candidates: Sequence[Tuple[str, Optional[str]]]) -> Tuple[ctypes.CDLL, str]:
    """Loads the first candidate that opens and has a compatible version.

    Returns (library, path). Raises :class:`LibraryLoadError` listing every attempt when none does.
    """
    attempts: List[Tuple[str, str]] = []
    for where, path in candidates:
        if not path:
            attempts.append((where, _NO_PATH_REASONS.get(where, "nothing there")))
            continue
        label = f"{where} ({path})"
        if os.sep in path and not os.path.exists(path):
            attempts.append((label, "no such file"))
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            attempts.append((label, str(exc)))
            continue
        if not hasattr(lib, "pdkv_version"):
            attempts.append((label, "not a pdkv library (no pdkv_version symbol)"))
            continue
        _declare(lib)
        version = lib.pdkv_version()
        major = (version >> 16) & 0xFF
        if major != HEADER_VERSION_MAJOR:
            attempts.append(
                (
                    label,
                    f"ABI major version {major} (library {lib.pdkv_version_string().decode()})"
                    f" differs from the header's PDKV_VERSION_MAJOR {HEADER_VERSION_MAJOR}",
                )
            )
            continue
        return lib, path
    raise LibraryLoadError(attempts)


def _declare(lib: ctypes.CDLL) -> None:
    """Sets restype and argtypes of every function of :data:`FUNCTIONS` that ``lib`` exports.

    A library older than this package (same major, lower minor) lacks the newest functions:
    they are left undeclared and calling them raises :class:`MissingFunctionError`."""
    for name, (restype, argtypes) in FUNCTIONS.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue
        fn.restype = restype
        fn.argtypes = argtypes


class MissingFunctionError(AttributeError):
    """The loaded libpdkv does not export a function of pdkv.h (it predates that function)."""


def function(name: str) -> Any:
    """The declared C function ``name`` of the loaded library."""
    if name not in FUNCTIONS:
        raise KeyError(f"{name} is not a declared pdkv function")
    try:
        return getattr(lib(), name)
    except AttributeError:
        raise MissingFunctionError(
            f"the loaded libpdkv ({library_path()}, version {lib().pdkv_version_string().decode()}) "
            f"does not export {name}; rebuild it from this checkout"
        ) from None


_lock = threading.Lock()
_loaded: Optional[Tuple[ctypes.CDLL, str]] = None


def lib() -> ctypes.CDLL:
    """The loaded libpdkv (loaded on first use; raises :class:`LibraryLoadError`)."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = load_library(library_candidates())
    return _loaded[0]


def library_path() -> str:
    """Path (or loader name) libpdkv was loaded from."""
    lib()
    assert _loaded is not None
    return _loaded[1]


Fn = Callable[..., Any]
