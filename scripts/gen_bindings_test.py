#!/usr/bin/env python3
"""Self-test of scripts/gen_bindings.py (run by the ctest bindings_generator_self_test).

Proves that the drift check fails when the header changes and a generated layer was not
regenerated (a function, a status, a struct field added to a copy of the headers), that it names
the regenerate command, and that the reader stops with file:line on what it does not understand.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GEN = REPO / "scripts" / "gen_bindings.py"

spec = importlib.util.spec_from_file_location("gen_bindings", GEN)
assert spec is not None and spec.loader is not None
gen = importlib.util.module_from_spec(spec)
sys.modules["gen_bindings"] = gen
spec.loader.exec_module(gen)

failures = []


def check(cond: bool, what: str) -> None:
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run_check(include: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GEN), "--check", "--include", str(include), "--out", str(REPO)],
                          capture_output=True, text=True)


def edited_copy(tmp: Path, name: str, header: str, old: str, new: str) -> Path:
    """A copy of capi/include with `old` replaced by `new` in pdkv/<header>."""
    root = tmp / name
    shutil.copytree(REPO / "capi" / "include", root)
    p = root / "pdkv" / header
    text = p.read_text()
    assert old in text, f"{old!r} not in {header}"
    p.write_text(text.replace(old, new, 1))
    return root


def expect_error(tmp: Path, name: str, header: str, old: str, new: str, needle: str) -> None:
    root = edited_copy(tmp, name, header, old, new)
    try:
        gen.read_api(root)
    except gen.HeaderError as e:
        check(needle in str(e) and f"pdkv/{header}:" in str(e), f"{name}: reader rejects it ({e})")
        return
    check(False, f"{name}: reader accepted an unsupported construct")


def layouts(cc: str) -> int:
    """Every ctypes struct mirror of python/pdkv/_raw.py against the C compiler: sizeof, alignment
    and every field's offset (the marshalling round trip of each struct, without the library)."""
    import ctypes

    spec = importlib.util.spec_from_file_location("pdkv_raw", REPO / "python" / "pdkv" / "_raw.py")
    assert spec is not None and spec.loader is not None
    raw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(raw)
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <pdkv.h>", "int main(void) {"]
    for s in raw.STRUCTS:
        c = s._c_name_
        lines.append(f'  printf("{c} %zu %zu\\n", sizeof({c}), _Alignof({c}));')
        lines += [f'  printf("{c}.{f} %zu\\n", offsetof({c}, {f}));' for f, _ in s._fields_]
    lines += ["  return 0;", "}"]
    with tempfile.TemporaryDirectory() as t:
        src, exe = Path(t) / "layout.c", Path(t) / "layout"
        src.write_text("\n".join(lines) + "\n")
        subprocess.run([cc, "-std=c11", "-I", str(REPO / "capi" / "include"), str(src), "-o", str(exe)], check=True)
        got = dict(ln.split(" ", 1) for ln in subprocess.run([str(exe)], check=True, capture_output=True,
                                                              text=True).stdout.splitlines())
    n = 0
    for s in raw.STRUCTS:
        c = s._c_name_
        check(got[c] == f"{ctypes.sizeof(s)} {ctypes.alignment(s)}",
              f"{c}: C size/alignment {got[c]}, ctypes {ctypes.sizeof(s)} {ctypes.alignment(s)}")
        for f, _ in s._fields_:
            n += 1
            if int(got[f"{c}.{f}"]) != getattr(s, f).offset:
                check(False, f"{c}.{f}: C offset {got[c + '.' + f]}, ctypes {getattr(s, f).offset}")
    check(len(raw.STRUCTS) > 40, f"{len(raw.STRUCTS)} structs, {n} fields compared")
    return 1 if failures else 0


def main() -> int:
    if sys.argv[1:2] == ["--layouts"]:
        return layouts(sys.argv[2])
    base = gen.generate(REPO / "capi" / "include")
    r = run_check(REPO / "capi" / "include")
    check(r.returncode == 0, f"the committed files match the header ({r.stdout.strip()})")

    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        # 1. One function added: every function table changes, the check fails naming the command.
        fn = ("PDKV_API pdkv_status_t pdkv_drift_probe(const pdkv_transfer_plan_t *plan, uint32_t x,\n"
              "                                        uint64_t *out, pdkv_error_t **err);\n")
        root = edited_copy(tmp, "function", "plan.h", "#ifdef __cplusplus\n} /* extern \"C\" */", fn + "\n#ifdef __cplusplus\n} /* extern \"C\" */")
        out = gen.generate(root)
        check('"pdkv_drift_probe": (c_int, [POINTER(TransferPlanT), c_uint32, POINTER(c_uint64), POINTER(POINTER(ErrorT))]),'
              in out["python/pdkv/_raw.py"], "an added function gets its ctypes prototype")
        check('"pdkv_drift_probe"' in out["go/zz_generated_test.go"], "an added function is in Go's header list")
        check('"pdkv_drift_probe"' in out["rust/pdkv/tests/common/header_functions.rs"], "an added function is in Rust's header list")
        r = run_check(root)
        check(r.returncode == 1 and "DRIFT" in r.stdout and gen.REGENERATE in r.stdout
              and "python/pdkv/_raw.py" in r.stdout and "+    \"pdkv_drift_probe\"" in r.stdout,
              "the drift check fails on an added function, shows it and names the regenerate command")

        # 2. One status added: the Go and Rust status tables change.
        root = edited_copy(tmp, "status", "errors.h", "PDKV_ERR_SHUTDOWN = 207 ",
                           "PDKV_ERR_SHUTDOWN = 207, /* probe */\n  PDKV_ERR_DRIFT_PROBE = 208 /* a probe */ ")
        out = gen.generate(root)
        check("StatusDriftProbe Status = C.PDKV_ERR_DRIFT_PROBE" in out["go/zz_generated.go"]
              and "ErrDriftProbe = &Error{Status: StatusDriftProbe}" in out["go/zz_generated.go"],
              "an added status gets its Go constant and sentinel")
        check("sys::PDKV_ERR_DRIFT_PROBE => Status::DriftProbe," in out["rust/pdkv/src/status.rs"],
              "an added status gets its Rust variant")
        check("PDKV_ERR_DRIFT_PROBE = 208" in out["python/pdkv/_raw.py"], "an added status gets its Python constant")
        check(run_check(root).returncode == 1, "the drift check fails on an added status")

        # 3. One enumerator added: the Python IntEnum and Rust's enum table change.
        root = edited_copy(tmp, "enumerator", "geometry.h", "PDKV_CONV_LAYOUT_SD = 1\n",
                           "PDKV_CONV_LAYOUT_SD = 1,\n  PDKV_CONV_LAYOUT_PROBE = 7 /* a probe */\n")
        out = gen.generate(root)
        check("    PROBE = 7  #: a probe\n" in out["python/pdkv/_raw.py"], "an added enumerator joins its Python IntEnum")
        check('("PDKV_CONV_LAYOUT_PROBE", 7)' in out["rust/pdkv/tests/common/header_enums.rs"],
              "an added enumerator joins Rust's round-trip table")
        check(run_check(root).returncode == 1, "the drift check fails on an added enumerator")

        # 4. One struct field appended: the ctypes mirror changes.
        root = edited_copy(tmp, "field", "plan.h", "typedef struct pdkv_stage_pair {\n",
                           "typedef struct pdkv_stage_pair {\n  uint64_t drift_probe;\n")
        out = gen.generate(root)
        check('("drift_probe", c_uint64),' in out["python/pdkv/_raw.py"], "an added field is mirrored")
        check(run_check(root).returncode == 1, "the drift check fails on an added field")

        # 6. A function marked @plain: its wrappers and conformance ops in every language; a marked
        #    function of another shape stops the generator.
        fn = ("/* A probe. @plain */\n"
              "PDKV_API pdkv_status_t pdkv_plain_probe(uint32_t a_size, uint8_t flag_on, int32_t kind,\n"
              "                                        pdkv_u64_list_t **out, pdkv_error_t **err);\n")
        root = edited_copy(tmp, "plain", "plan.h", "#ifdef __cplusplus\n} /* extern \"C\" */", fn + "\n#ifdef __cplusplus\n} /* extern \"C\" */")
        out = gen.generate(root)
        check("def plain_probe(a_size: int, flag_on: bool, kind: int) -> Tuple[int, ...]:" in out["python/pdkv/_plain.py"]
              and '"pdkv_plain_probe": (plain_probe, (("a_size", "int"), ("flag_on", "bool"), ("kind", "int"),), ("out",)),'
              in out["python/pdkv/_plain.py"], "a @plain function gets its Python wrapper and op")
        check("func PlainProbe(aSize uint32, flagOn bool, kind int32) ([]uint64, error) {" in out["go/zz_plain.go"]
              and 'ops["pdkv_plain_probe"]' in out["go/zz_plain_test.go"], "a @plain function gets its Go wrapper and op")
        check("pub fn plain_probe(a_size: u32, flag_on: bool, kind: i32) -> Result<Vec<u64>> {" in out["rust/pdkv/src/plain.rs"]
              and '"pdkv_plain_probe" => plain_plain_probe,' in out["rust/pdkv/tests/common/plain_ops.rs"],
              "a @plain function gets its Rust wrapper and op")
        check('table["pdkv_plain_probe"]' in out["tests/capi/conformance_plain.inc"], "a @plain function gets its C op")
        r = run_check(root)
        check(r.returncode == 1 and "python/pdkv/_plain.py" in r.stdout and "go/zz_plain.go" in r.stdout
              and "rust/pdkv/src/plain.rs" in r.stdout and "tests/capi/conformance_plain.inc" in r.stdout,
              "the drift check fails on an added @plain function in every generated wrapper file")
        fn2 = ("/* Two outputs. @plain */\n"
               "PDKV_API pdkv_status_t pdkv_plain_pair(uint64_t x, uint32_t *lo, uint8_t *hi, pdkv_error_t **err);\n")
        root = edited_copy(tmp, "plain-pair", "plan.h", "#ifdef __cplusplus\n} /* extern \"C\" */", fn2 + "\n#ifdef __cplusplus\n} /* extern \"C\" */")
        out = gen.generate(root)
        check("def plain_pair(x: int) -> Tuple[int, bool]:" in out["python/pdkv/_plain.py"]
              and "func PlainPair(x uint64) (uint32, bool, error) {" in out["go/zz_plain.go"]
              and "pub fn plain_pair(x: u64) -> Result<(u32, bool)> {" in out["rust/pdkv/src/plain.rs"]
              and 'table["pdkv_plain_pair"] = {{"lo", "hi"},' in out["tests/capi/conformance_plain.inc"],
              "a @plain function with two scalar outputs returns a tuple and has one op key per output")
        check("pub fn physical_head_range(tp_size: u32, tp_rank: u32, total_kv_heads: u32) -> Result<std::ops::Range<u32>> {"
              in base["rust/pdkv/src/plain.rs"] and "Ok(out_begin..out_end)" in base["rust/pdkv/src/plain.rs"],
              "@plain(range) makes the Rust wrapper return a Range")
        root = edited_copy(tmp, "plain-range-names", "plan.h", "#ifdef __cplusplus\n} /* extern \"C\" */",
                           "/* @plain(range) */\nPDKV_API pdkv_status_t pdkv_plain_bad(uint32_t x, uint32_t *lo, uint32_t *hi, pdkv_error_t **err);\n"
                           "\n#ifdef __cplusplus\n} /* extern \"C\" */")
        try:
            gen.generate(root)
            check(False, "@plain(range) with outputs not named begin, end is refused")
        except gen.HeaderError as e:
            check("begin and end" in str(e), f"@plain(range) with outputs not named begin, end is refused ({e})")
        for what, bad in [("pointer input", "const uint32_t *ids"), ("handle input", "const pdkv_model_t *model"),
                          ("list beside a scalar output", "uint32_t x, uint32_t *n, pdkv_u32_list_t **more")]:
            root = edited_copy(tmp, "plain-" + what.replace(" ", "-"), "plan.h", "#ifdef __cplusplus\n} /* extern \"C\" */",
                               f"/* @plain */\nPDKV_API pdkv_status_t pdkv_plain_bad({bad}, uint64_t *out, pdkv_error_t **err);\n"
                               "\n#ifdef __cplusplus\n} /* extern \"C\" */")
            try:
                gen.generate(root)
                check(False, f"a @plain function with a {what} is refused")
            except gen.HeaderError as e:
                check("pdkv_plain_bad" in str(e) and "@plain" in str(e), f"a @plain function with a {what} is refused ({e})")

        # 5. What the reader does not understand stops it with file:line.
        expect_error(tmp, "array", "plan.h", "typedef struct pdkv_stage_pair {\n",
                     "typedef struct pdkv_stage_pair {\n  uint32_t probe[4];\n", "expected ';'")
        expect_error(tmp, "unknown-type", "plan.h", "typedef struct pdkv_stage_pair {\n",
                     "typedef struct pdkv_stage_pair {\n  pdkv_nothing_t probe;\n", "unknown type 'pdkv_nothing_t'")
        expect_error(tmp, "unsigned", "plan.h", "typedef struct pdkv_stage_pair {\n",
                     "typedef struct pdkv_stage_pair {\n  unsigned long probe;\n", "unsupported type spelling")
        expect_error(tmp, "directive", "plan.h", "#ifdef __cplusplus\n} /* extern", "#pragma once\n#ifdef __cplusplus\n} /* extern",
                     "unsupported directive")
        expect_error(tmp, "define", "agent.h", "#define PDKV_AGENT_FIELD_LISTEN_ADDRESS (1ULL << 0)",
                     "#define PDKV_AGENT_FIELD_LISTEN_ADDRESS PDKV_SOMETHING", "is not an integer")
        root = tmp / "orphan"
        shutil.copytree(REPO / "capi" / "include", root)
        (root / "pdkv" / "orphan.h").write_text("/* not included */\n")
        try:
            gen.read_api(root)
            check(False, "a pdkv/*.h that pdkv.h does not include is rejected")
        except gen.HeaderError as e:
            check("orphan.h" in str(e), f"a pdkv/*.h that pdkv.h does not include is rejected ({e})")

    # The committed generation is stable: generating twice gives the same text.
    check(gen.generate(REPO / "capi" / "include") == base, "generation is deterministic")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("gen_bindings self-test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
