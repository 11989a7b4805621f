#!/usr/bin/env bash
# The checks that need a CUDA GPU, as one short script for a lent GPU machine (device time is
# scarce: see README, "CUDA device memory"). On a machine without a GPU every step still runs and
# the CUDA parts report that they skipped, so the script can be tried anywhere first.
#
# Usage: scripts/gpu-checks.sh [BUILD_DIR]   (default build/gpu; configured and built here with the
#        benchmarks). Everything it prints also goes to $OUT/gpu-checks.log when $OUT is set.
#   1. CudaDevice.* and AgentDeviceMemory.* (the staging logic on cuMemAlloc memory, and on the
#      fake device);
#   2. bench/device_staging_bench, clear and sealed (512 MiB READs: each device row as a ratio of
#      the host/host row of the same run; docs/benchmarks.md, "CUDA device memory, staged");
#   3. python/tests/test_cuda_example.py when torch with CUDA is importable.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/gpu}
LOG=${OUT:+$OUT/gpu-checks.log}
log() { if [ -n "$LOG" ]; then tee -a "$LOG"; else cat; fi; }
status=0
step() {
  echo "==== $* ====" | log
  "$@" 2>&1 | log
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "FAILED ($rc): $*" | log; status=1; }
}

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | log
step cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPDKV_BUILD_BENCH=ON
step cmake --build "$BUILD" -j "$(nproc)" --target pdkv executor_agent_device_memory_test device_staging_bench
step "$BUILD/tests/executor/executor_agent_device_memory_test" --gtest_filter='CudaDevice.*:AgentDeviceMemory.*'
step "$BUILD/bench/device_staging_bench" --region-mib 256 --reps 5
step "$BUILD/bench/device_staging_bench" --region-mib 256 --reps 5 --key
if /usr/bin/python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  step env PDKV_LIB_DIR="$PWD/$BUILD/capi" /usr/bin/python3 -m pytest -q python/tests/test_cuda_example.py
else
  echo "==== python/tests/test_cuda_example.py skipped: no torch with CUDA here ====" | log
fi
echo "gpu-checks: $([ $status -eq 0 ] && echo "all steps passed" || echo "some steps FAILED")" | log
exit $status
