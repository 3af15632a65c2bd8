#!/usr/bin/env bash
# The first two tiles' rows fetched at once (the first staged in K/V tile 1), against ce75c09's libraries; two rounds.
set -u
export VLLM_BACKPORT_SM_TABLE=.devcarry/two0/sm_table.json
export PYTHONPATH=$PWD:$PWD/engine
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
ROUNDS=2 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b80 .devcarry/base .devcarry/two0 sm80 > $OUT/b80.out 2>&1
ROUNDS=2 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b89 .devcarry/base .devcarry/two0 sm89 > $OUT/b89.out 2>&1
NO_HOST=1 ROUNDS=2 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b86 .devcarry/base .devcarry/two0 sm86 > $OUT/b86.out 2>&1
cat $OUT/b80/summary.txt $OUT/b89/summary.txt $OUT/b86/summary.txt
grep -h "Ran\|OK\|FAIL" $OUT/b*/sparse-gpu-new-*.log
tar czf $OUT/all.tgz -C $OUT --exclude all.tgz .
