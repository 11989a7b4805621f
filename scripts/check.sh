#!/usr/bin/env bash
# The README's test command: on a fresh Debian bookworm machine, install what pdkv needs and run
# every test suite (C++ core, C API, ASan+UBSan, the executor under ThreadSanitizer, fuzzing, install check, Rust, Go, Python).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/test-all.sh
