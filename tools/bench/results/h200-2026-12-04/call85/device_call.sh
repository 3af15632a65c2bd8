#!/usr/bin/env bash
# Call 85: the sparse MLA GPU tests of call 84's build (.devcarry/new, the capture-chosen merge)
# from sm86 PTX, the one SM call 84 left out.
set -u
final=$OUT
OUT=$(mktemp -d)
out=$OUT
export VLLM_BACKPORT_SM_TABLE=.devcarry/new/sm_table.json
. tools/bench/device_run_lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
run sparse-gpu-new-sm86 env VLLM_BACKPORT_KERNELS_DIR=.devcarry/new VLLM_BACKPORT_TARGET=sm86 timeout 150 \
  python3 tests/kernels/sparse_mla/gpu_test.py
grep -h "Ran\|^OK\|FAIL\|Error\|worst" $OUT/sparse-gpu-new-*.log | head -30
tar -C $OUT -czf $final/call85.tgz .
