#!/usr/bin/env bash
# The split merge with 8 columns per thread (two heads per block) at 2 splits only (4-16 splits: the
# committed PTX), against the committed build (f07b2e2's kernels): GPU tests from every SM's PTX, decode rows (two rounds on
# sm80, one on sm86/89), then each kernel's own time (split-cost bench) for both builds on sm80.
set -u
# Results go to a scratch folder, then one tarball in $OUT (the device returns a limited file count).
final=$OUT
OUT=$(mktemp -d)
export VLLM_BACKPORT_SM_TABLE=.devcarry/new/sm_table.json
export PYTHONPATH=$PWD:$PWD/engine
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
b=1,8,17,32,33,48,64
NO_PREFILL=1 NO_HOST=1 ROUNDS=2 BATCHES=$b tools/bench/sparse_mla_ab_device_run.sh $OUT/b80 .devcarry/base .devcarry/new sm80 > $OUT/b80.out 2>&1
NO_PREFILL=1 NO_HOST=1 ROUNDS=1 BATCHES=$b tools/bench/sparse_mla_ab_device_run.sh $OUT/b89 .devcarry/base .devcarry/new sm89 > $OUT/b89.out 2>&1
NO_PREFILL=1 NO_HOST=1 ROUNDS=1 BATCHES=$b tools/bench/sparse_mla_ab_device_run.sh $OUT/b86 .devcarry/base .devcarry/new sm86 > $OUT/b86.out 2>&1
mkdir -p $OUT/split-cost
for build in base new; do
  VLLM_BACKPORT_TARGET=sm80 timeout 120 python3 tools/bench/sparse_mla_split_cost_bench.py \
    --kernel-so .devcarry/$build/libvllm_backport_kernels_sm80.so --out $OUT/split-cost/split-cost-$build-sm80.json \
    > $OUT/split-cost/split-cost-$build-sm80.log 2>&1
done
cat $OUT/b80/summary.txt $OUT/b89/summary.txt $OUT/b86/summary.txt
grep -h "Ran\|OK\|FAIL\|Error\|error" $OUT/b*/sparse-gpu-new-*.log | head -40
tail -n 30 $OUT/split-cost/*.log
tar -C $OUT -czf $final/call74.tgz .
