#!/usr/bin/env bash
# The committed candidate (Bazel-built): staged output stores in decode and prefill, against e0a7da3's libraries.
set -u
export VLLM_BACKPORT_SM_TABLE=.devcarry/final/sm_table.json
export PYTHONPATH=$PWD:$PWD/engine
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
ROUNDS=1 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b80 .devcarry/base .devcarry/final sm80 > $OUT/b80.out 2>&1
ROUNDS=1 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b89 .devcarry/base .devcarry/final sm89 > $OUT/b89.out 2>&1
NO_HOST=1 ROUNDS=1 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b86 .devcarry/base .devcarry/final sm86 > $OUT/b86.out 2>&1
for build in base final; do
  VLLM_BACKPORT_TARGET=sm80 VLLM_BACKPORT_KERNELS_DIR=.devcarry/$build timeout 120 python3 tools/bench/sparse_mla_locality_bench.py --out $OUT/loc-$build.json > $OUT/loc-$build.log 2>&1
done
cat $OUT/b80/summary.txt $OUT/b89/summary.txt $OUT/b86/summary.txt
grep -h "Ran\|OK\|FAIL" $OUT/b*/sparse-gpu-new-*.log
tar czf $OUT/all.tgz -C $OUT --exclude all.tgz .
