#!/usr/bin/env bash
# The main job on a fresh machine: install build dependencies, build the `pdkv` tool, and run
# `pdkv plan` with the given arguments. Usage:
#   bash scripts/run-plan.sh --model nemotron-3-nano-30b --prefill-tp 4 --decode-tp 2 [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/release --target pdkv_cli -j "$(nproc)" >&2
exec build/release/tools/cli/pdkv plan "$@"
