#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) in build/fuzz and runs each one for a bounded
# time. Usage: scripts/fuzz.sh [seconds per target, default 30]. Exits non-zero on any crash,
# leak, sanitizer report or oracle failure; crashing inputs are kept in build/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-30}
BUILD=build/fuzz
CXX_BIN=${FUZZ_CXX:-clang++}
C_BIN=${FUZZ_CC:-clang}

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$CXX_BIN" -DCMAKE_C_COMPILER="$C_BIN" \
  -DPDKV_BUILD_FUZZ=ON -DPDKV_BUILD_TESTS=OFF -DPDKV_BUILD_BENCH=OFF >/dev/null
mapfile -t TARGETS < <(grep -v '^$' "$BUILD/fuzz/targets.txt")
cmake --build "$BUILD" -j "${JOBS:-2}" --target "${TARGETS[@]}"

mkdir -p "$BUILD/artifacts"
status=0
for t in "${TARGETS[@]}"; do
  seeds="fuzz/corpus/${t%_fuzz}"
  work="$BUILD/corpus/${t%_fuzz}"   # new inputs go here, never into the repository
  mkdir -p "$work"
  args=("-max_total_time=$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048
        "-artifact_prefix=$BUILD/artifacts/$t-" -print_final_stats=1 "$work")
  [ -d "$seeds" ] && args+=("$seeds")
  echo "== $t: ${SECONDS_PER_TARGET}s"
  if ! "$BUILD/fuzz/$t" "${args[@]}"; then
    echo "FAIL: $t crashed; see $BUILD/artifacts/" >&2
    status=1
  fi
done
exit $status
