"""The ctypes layer against pdkv.h: generated from the header (no drift), every declared function
exported by the library, struct layouts equal to the C compiler's, versions, library discovery."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from ctypes import POINTER, c_char, c_char_p, c_int, c_int32, c_size_t, c_uint16, c_uint32
from enum import IntEnum
from typing import Any

import pytest

from conftest import HEADER, PYTHON_DIR, REPO_ROOT

import pdkv
from pdkv import _ffi


def _generator() -> Any:
    """scripts/gen_bindings.py, the one reader of the header every binding's raw layer comes from."""
    spec = importlib.util.spec_from_file_location("gen_bindings", REPO_ROOT / "scripts" / "gen_bindings.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_bindings"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_raw_layer_is_generated_from_this_header() -> None:
    # The drift check of the ctypes layer (ctest bindings_generated_drift checks every binding):
    # pdkv/_raw.py is exactly what the generator makes of the header in this checkout.
    generated = _generator().generate(HEADER.parent)["python/pdkv/_raw.py"]
    assert (PYTHON_DIR / "pdkv" / "_raw.py").read_text() == generated, (
        "python/pdkv/_raw.py differs from the header: run python3 scripts/gen_bindings.py"
    )


def test_every_declared_function_is_exported_by_the_library() -> None:
    # FUNCTIONS holds every PDKV_API prototype of the header; the library built from the same
    # checkout exports each of them (a declared function the library lacks is a missing symbol).
    lib = _ffi.lib()
    missing = sorted(name for name in _ffi.FUNCTIONS if not hasattr(lib, name))
    assert not missing, f"declared in pdkv.h but not exported by {_ffi.library_path()}: {missing}"
    assert len(_ffi.FUNCTIONS) > 100


def test_generated_declarations_map_c_types_to_ctypes() -> None:
    # One function per mapping rule of the generator: scalars, enums (int), out handles
    # (pointer to pointer), const char * (c_char_p), a caller's char buffer (POINTER(c_char)),
    # const T *const * arrays of handles, struct pointers, void.
    err = POINTER(POINTER(_ffi.ErrorT))
    F = _ffi.FUNCTIONS
    assert F["pdkv_tp_ratio"] == (c_int, [c_uint32, c_uint32, POINTER(c_int32), err])
    assert F["pdkv_status_name"] == (c_char_p, [c_int])
    assert F["pdkv_error_free"] == (None, [POINTER(_ffi.ErrorT)])
    assert F["pdkv_version"] == (c_uint32, [])
    assert F["pdkv_geometry_log_line"] == (c_int, [POINTER(_ffi.GeometryT), c_size_t, POINTER(c_char_p), err])
    assert F["pdkv_transfer_plan_to_json"][1][1] is POINTER(c_char)
    assert F["pdkv_pipeline_stage_pairs"][1][0] is POINTER(POINTER(_ffi.EngineMetadataT))
    assert F["pdkv_model_new"] == (c_int, [POINTER(_ffi.ModelDescC), POINTER(POINTER(_ffi.ModelT)), err])
    assert F["pdkv_metadata_wire_version"] == (None, [POINTER(c_uint16), POINTER(c_uint16)])


def test_struct_formats_round_trip_through_the_ctypes_mirrors() -> None:
    # Each generated struct-module format (the batch packers' layout) packs distinct values that
    # the ctypes mirror (checked against the C compiler by ctest bindings_ctypes_layout) reads
    # back from the same offsets, field by field; two structs in a row stay aligned.
    import struct

    assert set(_ffi.STRUCT_FORMATS) == {s._c_name_ for s in _ffi.STRUCTS}
    for cls in _ffi.STRUCTS:
        fmt = _ffi.STRUCT_FORMATS[cls._c_name_]
        codes = [c for c in re.sub(r"0[A-Za-z]$", "", fmt)]
        assert len(codes) == len(cls._fields_), cls._c_name_
        assert struct.calcsize("@" + fmt) == ctypes.sizeof(cls), cls._c_name_
        assert struct.calcsize("@" + fmt * 2) == 2 * ctypes.sizeof(cls), cls._c_name_
        values = [b"x" if c == "c" else float(i) + 0.5 if c == "d" else i + 1 for i, c in enumerate(codes)]
        buf = struct.pack("@" + fmt, *values)
        for (name, _), code, value in zip(cls._fields_, codes, values):
            f = getattr(cls, name)
            assert f.size == struct.calcsize("@" + code), f"{cls._c_name_}.{name}"
            got = struct.unpack_from("@" + code, buf, f.offset)[0]
            assert got == value, f"{cls._c_name_}.{name}: packed {value!r}, read {got!r} at offset {f.offset}"


def test_status_names_are_the_library_names() -> None:
    # The generated status table against the library's own pdkv_status_name, for every status.
    fn = _ffi.function("pdkv_status_name")
    assert _ffi.STATUS_NAMES[0] == "PDKV_OK" and len(_ffi.STATUS_NAMES) >= 26
    for value, name in _ffi.STATUS_NAMES.items():
        assert fn(value).decode() == name


def test_python_enums_cover_the_header_enums() -> None:
    # Each IntEnum of the Pythonic API has exactly the values of its C enum (generated ENUMS).
    from pdkv import enums, errors

    classes = [c for c in vars(enums).values() if isinstance(c, type) and issubclass(c, IntEnum) and c is not IntEnum]
    classes.append(errors.Status)
    covered = set()
    for cls in classes:
        cname = re.search(r"``(pdkv_\w+_t)``", cls.__doc__ or "")
        assert cname, f"{cls.__name__}: docstring names no C enum"
        covered.add(cname.group(1))
        assert sorted(int(m) for m in cls) == sorted(_ffi.ENUMS[cname.group(1)].values()), cls.__name__
    # Every C enum has its IntEnum, but the cause domain (PdkvError.cause holds its raw int).
    assert covered | {"pdkv_cause_domain_t"} == set(_ffi.ENUMS), sorted(set(_ffi.ENUMS) - covered)


def test_bound_functions_carry_the_declarations() -> None:
    lib = _ffi.lib()
    for name, (restype, argtypes) in _ffi.FUNCTIONS.items():
        if not hasattr(lib, name):
            continue
        fn = getattr(lib, name)
        assert fn.restype is restype and list(fn.argtypes) == argtypes, name


def test_header_version_matches_package() -> None:
    major, minor, _ = _generator().read_api(HEADER.parent).version
    assert (major, minor) == (_ffi.HEADER_VERSION_MAJOR, _ffi.HEADER_VERSION_MINOR)
    assert pdkv.version()[0] == major
    assert pdkv.version_string() == "%d.%d.%d" % pdkv.version()


def _c_layout_program() -> str:
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <pdkv.h>", "int main(void) {"]
    for s in _ffi.STRUCTS:
        cname = s._c_name_
        lines.append(f'  printf("{cname} %zu %zu\\n", sizeof({cname}), _Alignof({cname}));')
        for field, _ in s._fields_:
            lines.append(f'  printf("{cname}.{field} %zu\\n", offsetof({cname}, {field}));')
    lines += ["  return 0;", "}"]
    return "\n".join(lines)


def test_struct_layouts_match_the_c_compiler(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to compare struct layouts with")
    src = tmp_path / "layout.c"
    src.write_text(_c_layout_program())
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", str(HEADER.parent), str(src), "-o", str(exe)], check=True)
    got = dict(
        line.split(" ", 1) for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    )
    for s in _ffi.STRUCTS:
        assert got[s._c_name_] == f"{ctypes.sizeof(s)} {ctypes.alignment(s)}", s._c_name_
        for field, _ in s._fields_:
            assert int(got[f"{s._c_name_}.{field}"]) == getattr(s, field).offset, f"{s._c_name_}.{field}"


def test_every_header_struct_is_mirrored() -> None:
    structs = {s.name for s in _generator().read_api(HEADER.parent).structs}
    assert structs == {s._c_name_ for s in _ffi.STRUCTS}


def test_load_failure_lists_every_place_tried(tmp_path: Path) -> None:
    bogus = tmp_path / "libpdkv.so.2"
    bogus.write_text("not an ELF file")
    candidates = [
        ("$PDKV_LIB_DIR", None),
        ("next to the package", str(tmp_path / "missing" / "libpdkv.so.2")),
        ("the directory recorded at install time", None),
        ("source checkout build", str(bogus)),
        ("the dynamic loader", "libpdkv-does-not-exist.so.0"),
    ]
    with pytest.raises(pdkv.LibraryLoadError) as info:
        _ffi.load_library(candidates)
    msg = str(info.value)
    assert "$PDKV_LIB_DIR: not set" in msg
    assert "the directory recorded at install time: none recorded" in msg
    assert "no such file" in msg and str(tmp_path / "missing") in msg
    assert str(bogus) in msg
    assert "libpdkv-does-not-exist.so.0" in msg
    assert "set PDKV_LIB_DIR to the directory holding libpdkv.so.2" in msg
    assert len(info.value.attempts) == 5
    assert isinstance(info.value, ImportError)


def test_load_rejects_a_library_without_pdkv_symbols() -> None:
    libc = ctypes.util.find_library("c")
    assert libc is not None
    with pytest.raises(pdkv.LibraryLoadError, match="not a pdkv library"):
        _ffi.load_library([("libc", libc)])


def test_candidates_order_and_env() -> None:
    c = _ffi.library_candidates({"PDKV_LIB_DIR": "/x/lib"}, installed_lib_dir="/opt/pdkv/lib")
    assert [where for where, _ in c] == [
        "$PDKV_LIB_DIR",
        "next to the package",
        "the directory recorded at install time",
        "source checkout build",
        "the dynamic loader",
    ]
    assert c[0][1] == "/x/lib/libpdkv.so.2"
    assert c[1][1] == str(PYTHON_DIR / "pdkv" / "libpdkv.so.2")
    assert c[2][1] == "/opt/pdkv/lib/libpdkv.so.2"
    assert c[3][1] == str(REPO_ROOT / "build" / "release" / "capi" / "libpdkv.so.2")
    assert c[4][1] == "libpdkv.so.2"
    assert _ffi.library_file_name() == f"libpdkv.so.{_ffi.HEADER_VERSION_MAJOR}"
    # An empty variable is unset; "" for the recorded directory means none was recorded.
    c = _ffi.library_candidates({"PDKV_LIB_DIR": ""}, installed_lib_dir="")
    assert c[0] == ("$PDKV_LIB_DIR", None) and c[2][1] is None


def test_pdkv_lib_dir_is_a_directory_and_wins(tmp_path: Path) -> None:
    # PDKV_LIB_DIR names the directory (the same meaning as in the Rust crate): a copy of the
    # loaded library there is the one loaded, before the source checkout build.
    (tmp_path / "libpdkv.so.2").symlink_to(os.path.realpath(_ffi.library_path()))
    env = dict(os.environ, PDKV_LIB_DIR=str(tmp_path), PYTHONPATH=str(PYTHON_DIR))
    r = subprocess.run([sys.executable, "-c", "import pdkv; print(pdkv.library_path())"], env=env,
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "libpdkv.so.2")


def test_import_fails_clearly_without_a_library(tmp_path: Path) -> None:
    # A copy of the package outside any checkout, pointed at a directory without the library.
    pkg = tmp_path / "pdkv"
    shutil.copytree(PYTHON_DIR / "pdkv", pkg, ignore=shutil.ignore_patterns("*.so*", "__pycache__", "_install.py"))
    env = dict(os.environ, PDKV_LIB_DIR=str(tmp_path / "nowhere"), PYTHONPATH=str(tmp_path))
    env.pop("LD_LIBRARY_PATH", None)
    r = subprocess.run([sys.executable, "-c", "import pdkv"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0
    assert "LibraryLoadError" in r.stderr
    assert str(tmp_path / "nowhere" / "libpdkv.so.2") in r.stderr and "no such file" in r.stderr


def test_the_package_is_typed() -> None:
    # PEP 561: the marker ships with the package (pyproject's package-data), so type checkers
    # read the annotations of an installed pdkv.
    assert (PYTHON_DIR / "pdkv" / "py.typed").is_file()
    assert 'pdkv = ["py.typed"]' in (PYTHON_DIR / "pyproject.toml").read_text()


def test_project_version_is_the_library_version() -> None:
    cmake = (REPO_ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(pdkv VERSION (\d+\.\d+\.\d+)", cmake)
    assert m is not None
    assert f'version = "{m.group(1)}"' in (PYTHON_DIR / "pyproject.toml").read_text()
    assert pdkv.version_string() == m.group(1)


def test_public_names_have_docstrings() -> None:
    for name in pdkv.__all__:
        obj = getattr(pdkv, name)
        if isinstance(obj, (int, str)):
            continue
        assert obj.__doc__ and obj.__doc__.strip(), f"pdkv.{name} has no docstring"
        if isinstance(obj, type):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not callable(member) and not isinstance(member, property):
                    continue
                assert getattr(member, "__doc__", None), f"pdkv.{name}.{attr} has no docstring"


def test_all_lists_exactly_the_public_names() -> None:
    # __all__ is a literal list (type checkers read it as the package's exports); every public,
    # non-module name the package defines must be in it, and nothing else.
    import types

    public = {
        name
        for name, value in vars(pdkv).items()
        if not name.startswith("_") and name != "annotations" and not isinstance(value, types.ModuleType)
    }
    assert sorted(pdkv.__all__) == sorted(public)
    assert len(pdkv.__all__) == len(set(pdkv.__all__))
