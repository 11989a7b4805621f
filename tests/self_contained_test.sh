#!/bin/sh
# Proves scripts/check-self-contained.sh catches every kind of outside citation it is meant to
# catch and lets the in-repository ones through: it plants one line of each kind in a scratch
# tree (not a git work tree, so the checker lists files with find) and compares the report.
set -eu
checker=$(cd "$(dirname "$0")/.." && pwd)/scripts/check-self-contained.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp/core" "$tmp/docs" "$tmp/tests"

# Allowed: the docs' own files, by repository path anywhere and by sibling name inside docs/.
printf '%s\n' '// Rules: docs/semantics.md §4 and docs/hybrid-geometry.md §1; tests/vectors/models.json.' >"$tmp/core/ok.hpp"
printf '%s\n' 'See [hybrid-geometry.md](hybrid-geometry.md) §3.' >"$tmp/docs/ok.md"
if ! sh "$checker" "$tmp" >"$tmp/out.txt" 2>&1; then
  cat "$tmp/out.txt"; echo "FAIL: the checker refused in-repository citations"; exit 1
fi

# Refused: one planted line per kind.
printf '%s\n' '// see vllm-semantics.md §3' >"$tmp/core/a.hpp"
printf '%s\n' '"models.json: kaito_n3nano"' >"$tmp/core/b.cpp"
printf '%s\n' '# shared/reference/hybrid-geometry.md' >"$tmp/tests/c.py"
printf '%s\n' 'in.open("/work/shared/x");' >"$tmp/tests/d.cpp"
printf '%s\n' '// worked numbers of hybrid-geometry.md §2.2' >"$tmp/core/e.hpp"
if sh "$checker" "$tmp" >"$tmp/out.txt" 2>&1; then
  cat "$tmp/out.txt"; echo "FAIL: the checker passed a tree with outside citations"; exit 1
fi
for f in core/a.hpp core/b.cpp tests/c.py tests/d.cpp core/e.hpp; do
  grep -q "^$f:1:" "$tmp/out.txt" || { cat "$tmp/out.txt"; echo "FAIL: $f was not reported"; exit 1; }
done
for f in core/ok.hpp docs/ok.md; do
  if grep -q "^$f:" "$tmp/out.txt"; then cat "$tmp/out.txt"; echo "FAIL: $f was reported"; exit 1; fi
done
echo "check-self-contained.sh reports each planted outside citation and passes the docs' own"
