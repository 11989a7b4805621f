#!/usr/bin/env bash
# From a fresh machine to a running P/D deployment: install the build dependencies
# (scripts/setup.sh), build the `pdkv` tool (RelWithDebInfo, without the test suites) and run
# `pdkv demo` with the given options. Without options: NVIDIA-Nemotron-3-Nano-30B, 4 prefill and
# 2 decode ranks as processes, 32 requests over shared memory, every byte verified. Usage:
#   bash scripts/run-demo.sh [--transport tcp] [--op write] [--kill-prefill-after 8] [--json] ...
# The exit status is pdkv demo's (pdkv demo --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >&2
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/release --target pdkv_cli -j "$(nproc)" >&2
exec build/release/tools/cli/pdkv demo "$@"
