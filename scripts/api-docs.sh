#!/usr/bin/env bash
# Generates the API reference of every language from its sources and fails on any warning:
#   C       OUT/c/pdkv-c-api.md   scripts/c_api_reference.py --strict (every public declaration
#                                 of pdkv.h and pdkv/*.h has its own comment)
#   Rust    rust/target/doc/      cargo doc with RUSTDOCFLAGS="-D warnings" (broken links,
#                                 missing docs: pdkv denies missing_docs)
#   Go      OUT/go/pdkv.txt       go doc -all (TestExportedIdentifiersAreDocumented, in the Go
#                                 suite, fails on an undocumented exported identifier)
#   Python  OUT/python/*.html     pydoc of the package and every public module, warnings as
#                                 errors; every module must have a docstring
# Usage: scripts/api-docs.sh [OUT]   (default build/api-docs). Python imports the package, which
# loads libpdkv: set PDKV_LIB_DIR or run from a checkout with build/release.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$(mkdir -p "${1:-build/api-docs}" && cd "${1:-build/api-docs}" && pwd)
PY=${PYTHON:-/usr/bin/python3}
if [ -d "$HOME/.cargo/bin" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi

echo "-- C: header reference"
"$PY" scripts/c_api_reference.py --self-test >/dev/null
"$PY" scripts/c_api_reference.py --strict capi/include "$OUT/c/pdkv-c-api.md"

echo "-- Rust: rustdoc"
(cd rust && RUSTDOCFLAGS="-D warnings" cargo doc --offline --workspace --no-deps -q)
echo "$ROOT/rust/target/doc/pdkv/index.html"

echo "-- Go: go doc"
mkdir -p "$OUT/go"
(cd go && go doc -all . > "$OUT/go/pdkv.txt")
echo "$OUT/go/pdkv.txt: $(grep -c '^func ' "$OUT/go/pdkv.txt") functions"

echo "-- Python: pydoc"
mkdir -p "$OUT/python"
PYTHONPATH="$ROOT/python" "$PY" - "$OUT/python" <<'PY'
import importlib
import pkgutil
import pydoc
import sys
import warnings
from pathlib import Path

out = Path(sys.argv[1])
warnings.simplefilter("error")  # a warning while importing or documenting fails the run
import pdkv

names = ["pdkv"] + [f"pdkv.{m.name}" for m in pkgutil.iter_modules(pdkv.__path__) if not m.name.startswith("_")]
bad = []
for name in names:
    module = importlib.import_module(name)
    if not (module.__doc__ or "").strip():
        bad.append(f"{name} has no module docstring")
    page = pydoc.html.page(pydoc.describe(module), pydoc.html.document(module, name))
    (out / f"{name}.html").write_text(page)
if bad:
    sys.exit("pydoc: " + "; ".join(bad))
print(f"{out}: {len(names)} modules")
PY
echo "API reference: C, Rust, Go and Python built without warnings"
