#!/usr/bin/env bash
# Regenerates src/bindings.rs from capi/include/pdkv.h with the exact bindgen flags the
# committed file was produced with. Usage: regenerate.sh [OUTPUT] (default: src/bindings.rs).
# The test `bindings_match_header` runs this script into a temporary file and fails on any
# difference, so the committed bindings cannot drift from the header.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
HEADER="$HERE/../../capi/include/pdkv.h"
OUT="${1:-$HERE/src/bindings.rs}"
BINDGEN="${BINDGEN:-bindgen}"
"$BINDGEN" "$HEADER" \
  --allowlist-function 'pdkv_.*' \
  --allowlist-type 'pdkv_.*' \
  --allowlist-var 'PDKV_.*' \
  --no-layout-tests \
  --no-prepend-enum-name \
  --size_t-is-usize \
  --no-rustfmt-bindings \
  -o "$OUT.tmp"
# Format explicitly (not through bindgen's own rustfmt lookup) so the output only depends on
# bindgen and rustfmt, with the workspace edition.
rustfmt --edition 2021 "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
