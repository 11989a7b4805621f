#!/usr/bin/env python3
"""Generates the C API reference (Markdown) from the public headers: pdkv.h, then every
capi/include/pdkv/*.h it includes, in order. Each function, type, enum and version macro becomes
an entry: its declaration as code and its own comment (the one right before it) as text; the
"---- Section ----" comments become headings and the header's opening comment its introduction.

A warning is any public declaration without its own comment (a PDKV_API function, a typedef, a
PDKV_ macro other than the PDKV_*_FIELD_* mask bits, which the header's conventions and the
struct fields they name document) or a declaration this script cannot read; with --strict (CI)
a warning fails the run.

Usage: c_api_reference.py [--strict] INCLUDE_DIR OUTPUT.md
       c_api_reference.py --self-test
Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import List, Optional, Tuple

SECTION = re.compile(r"^/\* -{3,} (.+?) -*\s*\*/$")


def comment_text(comment: str) -> str:
    """A /* ... */ comment as plain text: delimiters and the ' * ' continuation prefixes removed,
    indentation inside kept (lists and tables stay readable)."""
    body = comment.strip()[2:-2]
    lines = body.split("\n")
    out = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if i > 0 and stripped.startswith("*"):
            line = line.split("*", 1)[1]
            line = line[1:] if line.startswith(" ") else line
        out.append(line.rstrip() if i > 0 else line.strip())
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out)


def split_items(text: str) -> List[Tuple[str, str]]:
    """The header as a list of ("comment", text) and ("code", text) items at top level: comments
    are split off only where they stand alone (a comment inside a struct or enum body, or after
    code on the same line, stays part of that code)."""
    items: List[Tuple[str, str]] = []
    i, n = 0, len(text)
    depth = 0
    code_start: Optional[int] = None

    def flush(end: int) -> None:
        nonlocal code_start
        if code_start is not None and text[code_start:end].strip():
            items.append(("code", text[code_start:end].strip()))
        code_start = None

    while i < n:
        if text.startswith("/*", i):
            end = text.index("*/", i) + 2
            line_start = text.rfind("\n", 0, i) + 1
            alone = depth == 0 and not text[line_start:i].strip()
            if alone and (code_start is None or not text[code_start:i].strip()):
                flush(i)
                items.append(("comment", text[i:end]))
            elif code_start is None:
                code_start = i
            i = end
            continue
        c = text[i]
        if c == "#" and depth == 0 and text[text.rfind("\n", 0, i) + 1:i].strip() == "":
            flush(i)
            end = text.find("\n", i)
            end = n if end < 0 else end
            items.append(("code", text[i:end].strip()))
            i = end
            continue
        if not c.isspace() and code_start is None:
            code_start = i
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == ";" and depth == 0:
            flush(i + 1)
        i += 1
    flush(n)
    return items


def entry_name(code: str) -> Optional[str]:
    """The name an item documents, or None for code that is not public API (include guards,
    includes, extern "C", the PDKV_API definition)."""
    if code.startswith("#define PDKV_"):
        name = code.split()[1]
        return None if name == "PDKV_API" or name.endswith("_H") else name  # include guards
    if code.startswith("#"):
        return None
    if code.startswith("PDKV_API"):
        m = re.search(r"(\w+)\s*\(", code)
        return m.group(1) if m else "?"
    if code.startswith("typedef"):
        m = re.search(r"(\w+)\s*;$", code)
        return m.group(1) if m else "?"
    if code.startswith("extern") or code == "}":
        return None
    return "?"


def reference(include_dir: Path) -> Tuple[str, List[str]]:
    headers = [include_dir / "pdkv.h"] + sorted((include_dir / "pdkv").glob("*.h"))
    out: List[str] = ["# pdkv C API reference", "",
                      "Generated from the public headers by `scripts/c_api_reference.py`; the headers are the",
                      "source of truth. Each entry is the declaration and its own comment.", ""]
    warnings: List[str] = []
    for header in headers:
        rel = header.relative_to(include_dir)
        out += [f"## `{rel}`", ""]
        # The C++ linkage wrapper would put the whole header inside one brace: drop it.
        text = re.sub(r'#ifdef __cplusplus\s*\n(extern "C" \{|\})[^\n]*\n#endif', "", header.read_text())
        items = split_items(text)
        pending: Optional[str] = None
        first = True
        last_macro = False  # the previous entry was a #define: consecutive ones share a block
        for kind, text in items:
            if kind == "comment":
                m = SECTION.match(text.strip())
                if m:
                    out += [f"### {m.group(1).strip()}", ""]
                    pending = None
                elif first:
                    out += [comment_text(text), ""]  # the header's introduction
                else:
                    pending = text
                first = False
                last_macro = False
                continue
            first = False
            name = entry_name(text)
            if name is None:
                pending, last_macro = None, False
                continue
            if name == "?":
                warnings.append(f"{rel}: cannot read declaration: {text.splitlines()[0]}")
            is_macro = text.startswith("#define")
            if is_macro and last_macro and pending is None:
                out.insert(len(out) - 2, text)  # before the previous block's closing ```
                continue
            # Field-mask bits (PDKV_<STRUCT>_FIELD_<FIELD>) are documented by the header's
            # conventions and by the struct field they name, not one by one.
            if pending is None and "_FIELD_" not in name:
                warnings.append(f"{rel}: {name} has no comment of its own")
            out += [f"#### `{name}`", ""]
            if pending is not None:
                out += [comment_text(pending), ""]
            out += ["```c", text, "```", ""]
            pending, last_macro = None, is_macro
    return "\n".join(out), warnings


SELF_TEST_HEADER = """/*
 * pdkv.h - test header.
 */
#ifndef PDKV_H
#define PDKV_H
#ifdef __cplusplus
extern "C" {
#endif
/* Version. */
#define PDKV_VERSION_MAJOR 0
#define PDKV_VERSION_MINOR 2
/* ---- Things ---- */
/* A thing. */
typedef struct pdkv_thing pdkv_thing_t;
/* Frees a thing. NULL is allowed. Thread-safe. */
PDKV_API void pdkv_thing_free(pdkv_thing_t *t);
PDKV_API int pdkv_undocumented(int x);
#ifdef __cplusplus
} /* extern "C" */
#endif
#endif
"""


def self_test() -> int:
    """Runs the generator on a small header with one undocumented function: it must find the
    documented entries, group the version macros, and warn about exactly that function."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "pdkv").mkdir()
        (Path(d) / "pdkv.h").write_text(SELF_TEST_HEADER)
        text, warnings = reference(Path(d))
    assert warnings == ["pdkv.h: pdkv_undocumented has no comment of its own"], warnings
    assert "### Things" in text and "#### `pdkv_thing_free`" in text, text
    assert "Frees a thing. NULL is allowed. Thread-safe." in text, text
    assert "#define PDKV_VERSION_MAJOR 0\n#define PDKV_VERSION_MINOR 2\n```" in text, text
    assert "PDKV_H" not in text.replace("pdkv.h", ""), text
    print("c_api_reference self-test: ok")
    return 0


def main(argv: List[str]) -> int:
    if argv == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strict", action="store_true", help="fail on any warning")
    ap.add_argument("include_dir", type=Path)
    ap.add_argument("output", type=Path)
    args = ap.parse_args(argv)
    text, warnings = reference(args.include_dir)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    entries = text.count("\n#### ")
    print(f"{args.output}: {entries} entries, {len(warnings)} warning(s)")
    return 1 if warnings and args.strict else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
