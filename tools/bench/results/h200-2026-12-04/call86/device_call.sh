#!/usr/bin/env bash
# Call 86: the merge-path GPU test with the engine's own call added (no tuning: its plan's 16
# splits, eager and recorded into a CUDA graph), call 84's build (.devcarry/new), sm80 PTX.
set -u
final=$OUT
OUT=$(mktemp -d)
out=$OUT
export VLLM_BACKPORT_SM_TABLE=.devcarry/new/sm_table.json
. tools/bench/device_run_lib.sh
run sparse-gpu-merge-sm80 env VLLM_BACKPORT_KERNELS_DIR=.devcarry/new VLLM_BACKPORT_TARGET=sm80 timeout 120 \
  python3 tests/kernels/sparse_mla/gpu_test.py -v SparseMlaGpuTest.test_decode_splits_merged_in_kernel_and_apart_agree
tail -5 $OUT/sparse-gpu-merge-sm80.log
tar -C $OUT -czf $final/call86.tgz .
