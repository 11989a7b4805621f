#!/usr/bin/env bash
# Cross-language transfers (issue 9 item 4): a P rank driven from one language and a D rank
# from another, in two processes, move the same request; the D rank checks every byte against
# the pattern the P rank wrote (the shared "xfer" setup: rust/pdkv/examples/xfer_setup/mod.rs,
# go/internal/xfer, examples/python/xfer_setup.py, examples/c/agent_transfer.c). Each P rank
# leases the request and exits 0 only once the D rank's read completed it.
#
# Pairs (P -> D, transport): Python -> Rust (tcp), Go -> C (shm), Rust -> Python (auto),
# C -> Go (tcp).
#
# Usage: scripts/xlang-transfer.sh [BUILD_DIR]   (default build/release; libpdkv and
# examples/c/example_agent_transfer must be built there). Needs cargo, go and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=$(cd "${1:-build/release}" && pwd)
OUT="$BUILD/xlang"
mkdir -p "$OUT"
# Every binding finds this build's library and header with no other variable: Rust and Python
# load libpdkv from PDKV_LIB_DIR, Go (cgo) and C read the build tree's pdkv.pc (with an rpath).
export PDKV_LIB_DIR="$BUILD/capi"
export PKG_CONFIG_PATH="$BUILD/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
PY=${PYTHON:-/usr/bin/python3}

echo "building the Rust and Go transfer examples"
(cd rust && cargo build --offline -q -p pdkv --example transfer)
(cd go && GOFLAGS=-mod=mod GOPROXY=off go build -o "$OUT/go-transfer" ./examples/transfer)

rust_bin="$ROOT/rust/target/debug/examples/transfer"
c_bin="$BUILD/examples/c/example_agent_transfer"
[ -x "$c_bin" ] || { echo "missing $c_bin (build the example_agent_transfer target)"; exit 1; }

role_cmd() { # language role -> command words
  case "$1" in
    rust) echo "$rust_bin --role $2" ;;
    go) echo "$OUT/go-transfer --role $2" ;;
    python) echo "$PY $ROOT/examples/python/transfer.py --role $2" ;;
    c) echo "$c_bin --role $2" ;;
  esac
}

fails=0
run_pair() { # p_lang d_lang transport
  local p=$1 d=$2 transport=$3 plog="$OUT/$1-p.log" dlog="$OUT/$2-d.log" pid addr="" i
  local request="xlang-$p-$d"
  # Truncate before starting P: the LISTEN poll below must never see a previous run's line.
  : >"$plog"
  : >"$dlog"
  # shellcheck disable=SC2046
  timeout 30 $(role_cmd "$p" p) --transport "$transport" --request "$request" >>"$plog" 2>&1 &
  pid=$!
  for i in $(seq 1 300); do
    addr=$(sed -n 's/^LISTEN //p' "$plog" | head -n1)
    [ -n "$addr" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$addr" ]; then
    echo "FAIL $p -> $d ($transport): the P rank never listened"; cat "$plog"
    kill "$pid" 2>/dev/null || true; wait "$pid" || true
    fails=$((fails + 1)); return
  fi
  local drc=0 prc=0
  # shellcheck disable=SC2046
  timeout 30 $(role_cmd "$d" d) --connect "$addr" --transport "$transport" --request "$request" >"$dlog" 2>&1 || drc=$?
  [ "$drc" -eq 0 ] || kill "$pid" 2>/dev/null || true # a failed D never completes P's lease
  wait "$pid" || prc=$?
  if [ "$drc" -eq 0 ] && [ "$prc" -eq 0 ] && grep -q '^VERIFIED 12288' "$dlog"; then
    echo "ok   $p P -> $d D over $transport: $(grep '^VERIFIED' "$dlog")"
  else
    echo "FAIL $p P (exit $prc) -> $d D (exit $drc) over $transport"
    echo "--- P log"; cat "$plog"; echo "--- D log"; cat "$dlog"
    fails=$((fails + 1))
  fi
}

run_pair python rust tcp
run_pair go c shm
run_pair rust python auto
run_pair c go tcp
[ "$fails" -eq 0 ] || { echo "$fails cross-language pair(s) failed"; exit 1; }
echo "all cross-language pairs moved every byte"
