#!/usr/bin/env bash
# Installs a built tree into a fresh prefix and proves every language can use it as a new user
# would: from a directory outside the repository, with no pdkv variable set (PDKV_*,
# LD_LIBRARY_PATH and CGO_* are cleared; PKG_CONFIG_PATH names only the new prefix, which
# pkg-config does not search by default), it builds and runs
#   - a C program with pkg-config, and the same program as a CMake project (find_package(pdkv)),
#     also after installing it;
#   - a Rust crate depending on the repository's `pdkv` crate;
#   - a Go module using the repository's Go package (`#cgo pkg-config: pdkv`);
#   - a Python script with the package installed by `pip install` (offline, into a venv), and
#     `mypy --strict` on that script against the installed package (its py.typed);
# each being examples/engine/<language>: one request's plan, with a prefix hit, compiled through
# the engine-level API (pdkv/engine.h: the engine ranks described once, the request given as the
# schedulers' block tables) from Nemotron-3-Nano's config.json and compared byte for byte with the
# shared vector tests/vectors/engine.json "engine_plan/example_nano_config_json_p4_d2_align_prefix_hit".
# None of the programs is given LD_LIBRARY_PATH: they find libpdkv.so.2 through the rpath that
# pdkv.pc and CMake put in them (C, Go) or by the bindings' own search (Rust, Python), and the
# Rust and Python ones print the library they loaded, which must be the installed one.
#
# Usage: scripts/check-install.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build/release}" && pwd)
PY=${PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pdkv-install-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix
CASE=engine_plan/example_nano_config_json_p4_d2_align_prefix_hit

step() { echo "-- $*"; }
die() { echo "install check FAILED: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null || die "$1 not found (scripts/setup.sh installs it)"; }
need cc; need cmake; need pkg-config; need cargo; need go; need "$PY"

step "cmake --install $BUILD --prefix $PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
# Every public header is installed, agent.h and any later pdkv/*.h included.
(cd "$ROOT/capi/include" && find . -name '*.h' | sort) > "$WORK/headers.want"
(cd "$PREFIX/include" && find . -name '*.h' | sort) > "$WORK/headers.got"
diff -u "$WORK/headers.want" "$WORK/headers.got" || die "installed headers differ from capi/include"
"$PREFIX/bin/pdkv" --version >/dev/null || die "the installed pdkv tool does not run"

# A user's shell: nothing of pdkv's. Children inherit this environment.
for v in $(compgen -e); do
  case "$v" in PDKV_*|LD_LIBRARY_PATH|CGO_CFLAGS|CGO_CPPFLAGS|CGO_LDFLAGS|CARGO_TARGET_DIR) unset "$v" ;; esac
done
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
# A private Go build cache: Go 1.19 does not key cached cgo packages by pkg-config's output, so a
# package built here against this throw-away prefix must not be reused by later builds (nor an
# earlier build's package be reused here).
export GOCACHE="$WORK/go-cache"
export GOFLAGS=-mod=mod GOPROXY=off

# Inputs, copied out of the repository: the model's config.json and the expected plan.
CONFIG=$WORK/config.json
EXPECTED=$WORK/expected.json
cp "$ROOT/tests/data/hf_configs/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json" "$CONFIG"
"$PY" - "$ROOT/tests/vectors/engine.json" "$CASE" "$EXPECTED" <<'PY'
import json, sys
path, name, out = sys.argv[1:]
case = next(c for c in json.load(open(path))["cases"] if c["name"] == name)
open(out, "w").write("\n".join(case["output"]["lines"]) + "\n")
PY
cd "$WORK"

# run LABEL COMMAND...: runs one consumer; it must print "plan matches" (and, with
# LOADED_FROM set, report loading libpdkv from the prefix).
run() {
  local label=$1; shift
  "$@" "$CONFIG" "$EXPECTED" > "$WORK/$label.out" 2> "$WORK/$label.err" \
    || { cat "$WORK/$label.err" >&2; die "$label: the program failed"; }
  grep -q "^plan matches" "$WORK/$label.err" || { cat "$WORK/$label.err" >&2; die "$label: no match reported"; }
  if [ -n "${LOADED_FROM:-}" ]; then
    grep -q "^libpdkv: $PREFIX/" "$WORK/$label.err" \
      || { cat "$WORK/$label.err" >&2; die "$label: libpdkv was not loaded from $PREFIX"; }
  fi
  echo "   $label: plan matches the shared vector"
}

step "C with pkg-config"
cc -std=c99 -Wall -Wextra -Werror "$ROOT/examples/engine/c/engine_plan.c" -o "$WORK/c_engine_plan" \
  $(pkg-config --cflags --libs pdkv)
run c-pkg-config "$WORK/c_engine_plan"

step "C with CMake find_package(pdkv), built then installed"
cp -r "$ROOT/examples/engine/c" "$WORK/cmake-src"
cmake -S "$WORK/cmake-src" -B "$WORK/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DCMAKE_INSTALL_PREFIX="$WORK/cmake-install" >/dev/null
cmake --build "$WORK/cmake-build" >/dev/null
run cmake-build "$WORK/cmake-build/engine_plan"
cmake --install "$WORK/cmake-build" >/dev/null
run cmake-installed "$WORK/cmake-install/bin/engine_plan"

step "Rust crate depending on rust/pdkv"
cp -r "$ROOT/examples/engine/rust" "$WORK/rust"
rm -rf "$WORK/rust/target" "$WORK/rust/Cargo.lock"
sed -i "s|path = \"../../../rust/pdkv\"|path = \"$ROOT/rust/pdkv\"|" "$WORK/rust/Cargo.toml"
grep -q "path = \"$ROOT/rust/pdkv\"" "$WORK/rust/Cargo.toml" || die "could not point the Rust example at rust/pdkv"
(cd "$WORK/rust" && cargo build --offline -q)
LOADED_FROM=1 run rust "$WORK/rust/target/debug/pdkv-engine-example"

step "Go module using the pdkv package (#cgo pkg-config: pdkv)"
cp -r "$ROOT/examples/engine/go" "$WORK/go"
(cd "$WORK/go" && go mod edit -replace "github.com/pdkv/pdkv/go=$ROOT/go" && go build -o "$WORK/go_engine_plan" .)
run go "$WORK/go_engine_plan"

step "Python package installed with pip (offline, venv)"
# A copy of the project: pip builds in the project directory, which must not be the repository.
mkdir "$WORK/python-src"
(cd "$ROOT/python" && tar cf - --exclude=build --exclude='*.egg-info' --exclude=__pycache__ \
   --exclude=tests pyproject.toml setup.py README.md pdkv) | tar xf - -C "$WORK/python-src"
"$PY" -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/pip" install -q --no-build-isolation --no-index "$WORK/python-src" >/dev/null
cp "$ROOT/examples/engine/python/engine_plan.py" "$WORK/engine_plan.py"
LOADED_FROM=1 run python "$WORK/venv/bin/python" "$WORK/engine_plan.py"
if "$WORK/venv/bin/python" -c "import mypy" 2>/dev/null; then
  "$WORK/venv/bin/python" -m mypy --strict --no-incremental "$WORK/engine_plan.py" >/dev/null \
    || { "$WORK/venv/bin/python" -m mypy --strict --no-incremental "$WORK/engine_plan.py" >&2 || true; \
         die "mypy --strict on the Python example against the installed package"; }
  echo "   python: mypy --strict passes against the installed, typed package"
elif [ -n "${CI:-}" ]; then
  die "mypy not found (scripts/setup.sh installs it)"
fi

echo "install check: C (pkg-config, CMake), Rust, Go and Python consumers match the shared vector"
