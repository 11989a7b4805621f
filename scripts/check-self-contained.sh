#!/bin/sh
# Fails when a tracked file points outside the repository for the semantics it relies on: the
# rules live in docs/semantics.md and docs/hybrid-geometry.md, the published model values in
# tests/data/published_configs.json and the presets' `source` strings, so a comment, string or
# test that names a research file beside the checkout (vllm-semantics.md, models.json,
# shared/reference/..., an absolute /work/ path) or a hybrid-geometry.md other than docs' own is
# a regression. Run by ctest (self_contained_sources); usage: check-self-contained.sh [repo root].
#
# Allowed: ../shared/tools/vllm_plan_baseline.py, the external vLLM baseline program that
# bench/plan_vs_vllm.py runs (an input of the benchmark, documented in docs/benchmarks.md, not a
# citation of semantics).
set -eu
root=${1:-$(dirname "$0")/..}
cd "$root"
# This script and its own test name the patterns they look for.
self=scripts/check-self-contained.sh
self_test=tests/self_contained_test.sh

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files)
else  # a source tarball: every file but build outputs
  files=$(find . -type f -not -path './build/*' -not -path './.git/*' | sed 's|^\./||')
fi

bad=$(
  for f in $files; do
    { [ "$f" = "$self" ] || [ "$f" = "$self_test" ]; } && continue
    [ -f "$f" ] || continue
    # -I skips binary files. A bare hybrid-geometry.md is the sibling file only inside docs/.
    grep -InE 'vllm-semantics\.md|models\.json|shared/(reference|seeds|hooks)|(^|[^A-Za-z0-9_.~])/work/|hybrid-geometry\.md' "$f" 2>/dev/null |
      sed "s|^|$f:|" |
      while IFS= read -r line; do
        rest=$(printf '%s\n' "$line" | sed 's|docs/hybrid-geometry\.md||g; s|tests/vectors/models\.json||g')
        case "$f" in docs/*) rest=$(printf '%s\n' "$rest" | sed 's|hybrid-geometry\.md||g') ;; esac
        if printf '%s\n' "$rest" | grep -qE 'vllm-semantics\.md|models\.json|shared/(reference|seeds|hooks)|(^|[^A-Za-z0-9_.~])/work/|hybrid-geometry\.md'; then
          printf '%s\n' "$line"
        fi
      done
  done
)

if [ -n "$bad" ]; then
  echo "FAIL: these lines cite files outside the repository; cite docs/semantics.md §N,"
  echo "docs/hybrid-geometry.md §N or the model's published source instead:"
  printf '%s\n' "$bad"
  exit 1
fi
echo "self-contained: no tracked file cites a file outside the repository ($(printf '%s\n' "$files" | wc -l) files checked)"
