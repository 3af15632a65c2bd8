#!/usr/bin/env bash
# Two splits merged in the decode kernel (the row's second block), against f07b2e2's libraries;
# GPU tests from every SM's PTX, decode rows (two rounds on sm80 with the host bench, one on sm86/89).
set -u
export VLLM_BACKPORT_SM_TABLE=.devcarry/new/sm_table.json
export PYTHONPATH=$PWD:$PWD/engine
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
NO_PREFILL=1 ROUNDS=2 BATCHES=1,8,32,48,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b80 .devcarry/base .devcarry/new sm80 > $OUT/b80.out 2>&1
NO_PREFILL=1 NO_HOST=1 ROUNDS=1 BATCHES=1,8,32,48,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b89 .devcarry/base .devcarry/new sm89 > $OUT/b89.out 2>&1
NO_PREFILL=1 NO_HOST=1 ROUNDS=1 BATCHES=1,8,32,48,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b86 .devcarry/base .devcarry/new sm86 > $OUT/b86.out 2>&1
cat $OUT/b80/summary.txt $OUT/b89/summary.txt $OUT/b86/summary.txt
grep -h "Ran\|OK\|FAIL\|Error\|error" $OUT/b*/sparse-gpu-new-*.log | head -40
