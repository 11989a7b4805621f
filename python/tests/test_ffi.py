"""The ctypes layer against pdkv.h: every PDKV_API function declared with matching arity and
return kind, struct layouts equal to the C compiler's, versions, library discovery."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from conftest import HEADER, PYTHON_DIR, REPO_ROOT

import pdkv
from pdkv import _ffi


def _header_text() -> str:
    """pdkv.h and the headers it includes (capi/include/pdkv/*.h), comments removed."""
    subs = sorted((HEADER.parent / "pdkv").glob("*.h"))
    assert any(p.name == "agent.h" for p in subs), "capi/include/pdkv/agent.h not found"
    text = HEADER.read_text() + "".join(p.read_text() for p in subs)
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def test_field_bits_match_header() -> None:
    found = dict(re.findall(r"#define (PDKV_\w+_FIELD_\w+) \(1ULL << (\d+)\)", _header_text()))
    assert found, "no PDKV_*_FIELD_* macros found"
    assert {k: 1 << int(v) for k, v in found.items()} == _ffi.FIELD_BITS


def header_functions() -> Dict[str, Tuple[str, List[str]]]:
    """name -> (return type, parameter declarations) for every PDKV_API function of pdkv.h."""
    out: Dict[str, Tuple[str, List[str]]] = {}
    for m in re.finditer(r"PDKV_API\s+([^;{]*?)\b(pdkv_\w+)\s*\(([^)]*)\)\s*;", _header_text()):
        ret, name, params = m.group(1).strip(), m.group(2), m.group(3).strip()
        plist = [] if params in ("", "void") else [p.strip() for p in params.split(",")]
        out[name] = (ret, plist)
    return out


def test_header_parse_finds_functions() -> None:
    funcs = header_functions()
    assert "pdkv_tp_ratio" in funcs and "pdkv_error_free" in funcs
    # Every PDKV_API declaration was parsed (none skipped by the regex).
    assert len(funcs) == len(re.findall(r"PDKV_API\s+[^;{#]*?\bpdkv_\w+\s*\(", _header_text()))


def test_every_header_function_is_declared() -> None:
    funcs = header_functions()
    missing = sorted(set(funcs) - set(_ffi.FUNCTIONS))
    extra = sorted(set(_ffi.FUNCTIONS) - set(funcs))
    assert not missing, f"pdkv.h functions without argtypes/restype: {missing}"
    assert not extra, f"declared functions not in pdkv.h: {extra}"


@pytest.mark.parametrize("name", sorted(header_functions()))
def test_declaration_matches_header(name: str) -> None:
    ret, params = header_functions()[name]
    restype, argtypes = _ffi.FUNCTIONS[name]
    assert len(argtypes) == len(params), f"{name}: {len(argtypes)} argtypes for {params}"
    if ret == "void":
        assert restype is None
    elif ret == "pdkv_status_t":
        assert restype is ctypes.c_int
        if name != "pdkv_error_status":
            assert params[-1].replace(" ", "").startswith("pdkv_error_t**")
    elif ret == "const char *" or ret == "const char*":
        assert restype is ctypes.c_char_p
    else:
        c_types = {"uint32_t": ctypes.c_uint32, "size_t": ctypes.c_size_t}
        assert restype is c_types[ret], f"{name} returns {ret}"
    scalar = {
        "uint32_t": ctypes.c_uint32,
        "int32_t": ctypes.c_int32,
        "uint64_t": ctypes.c_uint64,
        "size_t": ctypes.c_size_t,
        "uint8_t": ctypes.c_uint8,
        "pdkv_status_t": ctypes.c_int,
    }
    for decl, at in zip(params, argtypes):
        typ = decl.rsplit(None, 1)[0] if "*" not in decl else None
        if typ is not None:
            assert at is scalar[typ], f"{name}: {decl} declared as {at}"
        else:
            stars = decl.count("*")
            depth, t = 0, at
            while hasattr(t, "_type_") and not isinstance(t._type_, str):
                depth, t = depth + 1, t._type_
            if t is ctypes.c_char_p:
                depth += 1
            assert depth == stars, f"{name}: {decl} declared as {at}"


def test_bound_functions_carry_the_declarations() -> None:
    lib = _ffi.lib()
    for name, (restype, argtypes) in _ffi.FUNCTIONS.items():
        if not hasattr(lib, name):
            continue
        fn = getattr(lib, name)
        assert fn.restype is restype and list(fn.argtypes) == argtypes, name


def test_header_version_matches_package() -> None:
    text = HEADER.read_text()
    major = int(re.search(r"#define PDKV_VERSION_MAJOR (\d+)", text).group(1))
    minor = int(re.search(r"#define PDKV_VERSION_MINOR (\d+)", text).group(1))
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
    structs = set(re.findall(r"typedef struct (\w+) \{", _header_text()))
    mirrored = {s._c_name_[: -len("_t")] for s in _ffi.STRUCTS}
    assert structs - mirrored == set(), f"structs without a ctypes mirror: {sorted(structs - mirrored)}"


def test_load_failure_lists_every_place_tried(tmp_path: Path) -> None:
    bogus = tmp_path / "libpdkv.so.0"
    bogus.write_text("not an ELF file")
    candidates = [
        ("$PDKV_LIB_DIR", None),
        ("next to the package", str(tmp_path / "missing" / "libpdkv.so.0")),
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
    assert "set PDKV_LIB_DIR to the directory holding libpdkv.so.0" in msg
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
    assert c[0][1] == "/x/lib/libpdkv.so.0"
    assert c[1][1] == str(PYTHON_DIR / "pdkv" / "libpdkv.so.0")
    assert c[2][1] == "/opt/pdkv/lib/libpdkv.so.0"
    assert c[3][1] == str(REPO_ROOT / "build" / "release" / "capi" / "libpdkv.so.0")
    assert c[4][1] == "libpdkv.so.0"
    assert _ffi.library_file_name() == f"libpdkv.so.{_ffi.HEADER_VERSION_MAJOR}"
    # An empty variable is unset; "" for the recorded directory means none was recorded.
    c = _ffi.library_candidates({"PDKV_LIB_DIR": ""}, installed_lib_dir="")
    assert c[0] == ("$PDKV_LIB_DIR", None) and c[2][1] is None


def test_pdkv_lib_dir_is_a_directory_and_wins(tmp_path: Path) -> None:
    # PDKV_LIB_DIR names the directory (the same meaning as in the Rust crate): a copy of the
    # loaded library there is the one loaded, before the source checkout build.
    (tmp_path / "libpdkv.so.0").symlink_to(os.path.realpath(_ffi.library_path()))
    env = dict(os.environ, PDKV_LIB_DIR=str(tmp_path), PYTHONPATH=str(PYTHON_DIR))
    r = subprocess.run([sys.executable, "-c", "import pdkv; print(pdkv.library_path())"], env=env,
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "libpdkv.so.0")


def test_import_fails_clearly_without_a_library(tmp_path: Path) -> None:
    # A copy of the package outside any checkout, pointed at a directory without the library.
    pkg = tmp_path / "pdkv"
    shutil.copytree(PYTHON_DIR / "pdkv", pkg, ignore=shutil.ignore_patterns("*.so*", "__pycache__", "_install.py"))
    env = dict(os.environ, PDKV_LIB_DIR=str(tmp_path / "nowhere"), PYTHONPATH=str(tmp_path))
    env.pop("LD_LIBRARY_PATH", None)
    r = subprocess.run([sys.executable, "-c", "import pdkv"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0
    assert "LibraryLoadError" in r.stderr
    assert str(tmp_path / "nowhere" / "libpdkv.so.0") in r.stderr and "no such file" in r.stderr


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
