#!/usr/bin/env bash
# Three splits per token list (the 2-split merge's 8-column form): GPU tests from every SM's PTX;
# each kernel's own time and the graph time at 2 and at 3 forced splits, same build (sm80); the
# engine rows that now choose 3 splits (batch 17-22 x 128 heads, 34-44 x 64 heads) from sm80/86/89.
set -u
# Results go to a scratch folder, then one tarball in $OUT (the device returns a limited file count).
final=$OUT
OUT=$(mktemp -d)
export VLLM_BACKPORT_SM_TABLE=.devcarry/new/sm_table.json
export PYTHONPATH=$PWD:$PWD/engine
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
for sm in sm80 sm86 sm89; do
  VLLM_BACKPORT_KERNELS_DIR=.devcarry/new VLLM_BACKPORT_TARGET=$sm python3 tests/kernels/sparse_mla/gpu_test.py \
    > $OUT/sparse-gpu-new-$sm.log 2>&1; echo "gpu tests $sm rc $?"
done
VLLM_BACKPORT_TARGET=sm80 timeout 200 python3 tools/bench/sparse_mla_split_cost_bench.py \
  --kernel-so .devcarry/new/libvllm_backport_kernels_sm80.so --out $OUT/split-cost-new-sm80.json \
  --shapes 17x128:2,3 20x128:2,3 22x128:2,3 34x64:2,3 40x64:2,3 44x64:2,3 > $OUT/split-cost-new-sm80.log 2>&1
gemm=""
for sm in sm80 sm86 sm89; do
  timeout 100 python3 tools/bench/sm8x_ptx_bench.py --sm-table $VLLM_BACKPORT_SM_TABLE \
    --kernel-so .devcarry/new/libvllm_backport_kernels_$sm.so --only "engine row" $gemm --sms $sm --no-prefill \
    --batches 17,20,22,23,33,34,40,44,45 --out $OUT/decode-new-$sm.json > $OUT/decode-new-$sm.log 2>&1
  echo "engine rows $sm rc $?"; gemm=--no-gemm
done
grep -h "Ran\|OK\|FAIL\|Error" $OUT/sparse-gpu-new-*.log | head -20
grep "^{" $OUT/split-cost-new-sm80.log; tail -n 3 $OUT/split-cost-new-sm80.log
tar -C $OUT -czf $final/call75.tgz .
