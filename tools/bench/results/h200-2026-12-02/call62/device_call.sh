#!/usr/bin/env bash
# Two blocks per SM (32 heads x 16-slot tiles) against the committed decode.
set -u
export VLLM_BACKPORT_SM_TABLE=.devcarry/base/sm_table.json
export PYTHONPATH=$PWD:$PWD/engine
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
for sm in sm80 sm89; do
  NO_HOST=1 NO_PREFILL=1 ROUNDS=2 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b${sm#sm} .devcarry/base .devcarry/new $sm > $OUT/b${sm#sm}.out 2>&1
done
NO_HOST=1 NO_PREFILL=1 ROUNDS=1 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b86 .devcarry/base .devcarry/new sm86 > $OUT/b86.out 2>&1
for build in base new; do
  VLLM_BACKPORT_TARGET=sm80 VLLM_BACKPORT_KERNELS_DIR=.devcarry/$build timeout 120 python3 tools/bench/sparse_mla_locality_bench.py --out $OUT/loc-$build.json > $OUT/loc-$build.log 2>&1
done
# (This call also ran call 63's Nsight Compute steps, which failed here without
# VLLM_BACKPORT_TARGET=sm80: see call63/device_calls.sh.)
tar czf $OUT/all.tgz -C $OUT --exclude all.tgz .
