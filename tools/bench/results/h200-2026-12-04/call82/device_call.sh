#!/usr/bin/env bash
# Call 82: the committed prefill (Bazel's libraries of main's HEAD in .devcarry/head) at all six of
# issue 16's prefill shapes (8K / 32K / 64K tokens x 64 / 128 heads; calls 68 and 80 ran 64 heads at
# 8K only), two rounds from sm80, sm86 and sm89 PTX, each round with the mma.sync ceiling measured
# again, so the ceiling's spread within one call shows next to the rows it divides.
set -u
final=$OUT
OUT=$(mktemp -d)
export VLLM_BACKPORT_SM_TABLE=.devcarry/head/sm_table.json VLLM_BACKPORT_KERNELS_DIR=.devcarry/head
out=$OUT
. tools/bench/device_run_lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
for round in 1 2; do
  for sm in sm80 sm86 sm89; do
    run prefill-r$round-$sm timeout 150 python3 tools/bench/sm8x_ptx_bench.py --sm-table $VLLM_BACKPORT_SM_TABLE \
      --kernel-so .devcarry/head/libvllm_backport_kernels_$sm.so --only "engine row" --sms $sm --batches 64 \
      --out $OUT/prefill-r$round-$sm.json
  done
done
grep -h '"prefill"\|"gemm"' $OUT/prefill-r*.log | cut -c1-200
tar -C $OUT -czf $final/call82.tgz .
