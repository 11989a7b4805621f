#!/bin/sh
# The exported-symbol check of libpdkv.so (issue 11: "a clean shared library").
#
#   check-exports.sh LIBRARY HEADER
#       Fails (exit 1) unless LIBRARY
#         - exports no defined dynamic symbol other than pdkv_* (nm -D --defined-only): a C++
#           symbol, an nlohmann_json template or anything from a static library linked in would
#           be part of the ABI by accident and could clash with an engine's own copy;
#         - exports every function HEADER declares with PDKV_API (the version script must not
#           hide one);
#         - has the SONAME libpdkv.so.<PDKV_VERSION_MAJOR of HEADER> (one SONAME per ABI).
#   check-exports.sh --self-test CC MAP
#       Proves the check can fail: builds small libraries with CC and expects it to reject one
#       that leaks a symbol, one missing a declared function and one with the wrong SONAME, and
#       to accept a leaky one linked with the version script MAP.
#
# Run by ctest (capi_exports, capi_exports_self_test in tests/exports.cmake).
set -eu

fail() {
  echo "check-exports: FAIL: $*"
  exit 1
}

check() {
  lib=$1
  header=$2
  [ -f "$lib" ] || fail "$lib: no such file"
  [ -f "$header" ] || fail "$header: no such file"
  command -v nm >/dev/null 2>&1 || fail "nm not found (apt-get install binutils)"
  command -v readelf >/dev/null 2>&1 || fail "readelf not found (apt-get install binutils)"

  # "ADDRESS TYPE NAME" per line; a name may carry @VERSION / @@VERSION when the library
  # versions its symbols, and a version node itself shows as an absolute (A) symbol.
  symbols=$(nm -D --defined-only "$lib" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u)
  [ -n "$symbols" ] || fail "$lib exports no symbol at all"
  leaked=$(printf '%s\n' "$symbols" | grep -v '^pdkv_' || true)
  if [ -n "$leaked" ]; then
    count=$(printf '%s\n' "$leaked" | wc -l)
    echo "check-exports: $lib exports $count symbol(s) that are not pdkv_* (first 20, demangled):"
    printf '%s\n' "$leaked" | head -n 20 | while read -r s; do
      printf '  %s' "$s"
      if command -v c++filt >/dev/null 2>&1; then
        d=$(printf '%s\n' "$s" | c++filt)
        [ "$d" = "$s" ] || printf '  (%s)' "$d"
      fi
      printf '\n'
    done
    fail "only the C API may be exported: keep capi/libpdkv.map on the link line of libpdkv"
  fi

  # The umbrella header and the concept headers it includes (pdkv/*.h beside it).
  headers="$header"
  for sub in "$(dirname "$header")"/pdkv/*.h; do
    [ -f "$sub" ] && headers="$headers $sub"
  done
  # shellcheck disable=SC2086 # the list is word-split on purpose (paths without spaces)
  declared=$(cat $headers | grep '^PDKV_API' | grep -o 'pdkv_[A-Za-z0-9_]*(' | tr -d '(' | sort -u)
  [ -n "$declared" ] || fail "$header declares no PDKV_API function"
  missing=$(printf '%s\n' "$declared" | while read -r f; do
    printf '%s\n' "$symbols" | grep -qx "$f" || echo "$f"
  done)
  if [ -n "$missing" ]; then
    fail "$lib does not export $(printf '%s\n' "$missing" | paste -sd ' ') (declared PDKV_API in $header)"
  fi

  major=$(sed -n 's/^#define PDKV_VERSION_MAJOR \([0-9][0-9]*\).*/\1/p' "$header")
  [ -n "$major" ] || fail "$header has no #define PDKV_VERSION_MAJOR"
  soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
  [ "$soname" = "libpdkv.so.$major" ] ||
    fail "$lib has SONAME '${soname:-none}', expected libpdkv.so.$major (PDKV_VERSION_MAJOR $major)"

  echo "check-exports: $lib OK: $(printf '%s\n' "$symbols" | wc -l) symbols, all pdkv_*," \
    "every PDKV_API function of $(basename "$header"), SONAME $soname"
}

# Runs check and expects it to fail with a message matching the extended regex $1.
expect_rejected() {
  want=$1
  shift
  if out=$(check "$@" 2>&1); then
    echo "$out"
    fail "self-test: the check accepted $1, which it must reject ($want)"
  fi
  printf '%s\n' "$out" | grep -Eq -e "$want" || {
    echo "$out"
    fail "self-test: the check rejected $1 without saying: $want"
  }
  echo "self-test: rejected as expected: $(printf '%s\n' "$out" | tail -n 1)"
}

self_test() {
  cc=$1
  map=$2
  [ -f "$map" ] || fail "$map: no such file"
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  cat >"$dir/pdkv.h" <<'EOF'
#define PDKV_VERSION_MAJOR 0
PDKV_API int pdkv_fixture_answer(void);
EOF
  cat >"$dir/leak.c" <<'EOF'
int pdkv_fixture_answer(void);
int fixture_leaked_helper(void);
int fixture_leaked_helper(void) { return 41; }
int pdkv_fixture_answer(void) { return fixture_leaked_helper() + 1; }
EOF
  cat >"$dir/other.c" <<'EOF'
int pdkv_fixture_other(void);
int pdkv_fixture_other(void) { return 1; }
EOF
  build() { # OUTPUT SONAME SOURCE [LINK FLAGS...]
    out=$1 so=$2 src=$3
    shift 3
    "$cc" -shared -fPIC -o "$dir/$out" "$dir/$src" "-Wl,-soname,$so" "$@" || fail "self-test: $cc failed"
  }
  build leak.so libpdkv.so.0 leak.c
  expect_rejected 'fixture_leaked_helper' "$dir/leak.so" "$dir/pdkv.h"
  build other.so libpdkv.so.0 other.c
  expect_rejected 'does not export pdkv_fixture_answer' "$dir/other.so" "$dir/pdkv.h"
  build soname.so libpdkv.so leak.c "-Wl,--version-script=$map"
  expect_rejected "SONAME 'libpdkv.so', expected libpdkv.so.0" "$dir/soname.so" "$dir/pdkv.h"
  build clean.so libpdkv.so.0 leak.c "-Wl,--version-script=$map"
  check "$dir/clean.so" "$dir/pdkv.h" >/dev/null || fail "self-test: the version script did not hide the leak"
  echo "check-exports: self-test OK (leak, missing function and SONAME rejected; $map hides the leak)"
}

case "${1:-}" in
  --self-test)
    [ $# -eq 3 ] || fail "usage: $0 --self-test CC MAP"
    self_test "$2" "$3"
    ;;
  -h | --help | "")
    sed -n '2,18p' "$0"
    [ -n "${1:-}" ]
    ;;
  *)
    [ $# -eq 2 ] || fail "usage: $0 LIBRARY HEADER (or --self-test CC MAP)"
    check "$1" "$2"
    ;;
esac
