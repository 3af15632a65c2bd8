#!/usr/bin/env bash
# Call 83: the kept merge rule of 0e1642d timed as its own build, A/B in one call. m1 = Bazel's
# libraries of main's HEAD (.devcarry/head: 4-16 splits merge inside the decode kernel), m0 = the
# same sources through tools/bench/kernel_variant.sh with -DVBK_MERGE_IN_KERNEL=0 (.devcarry/m0:
# every split count through split_merge_kernel). Engine decode rows (CUDA graphs) at the batch
# sizes of every split count on this card, sm80 and sm89 PTX, rounds in A B B A order.
set -u
final=$OUT
OUT=$(mktemp -d)
out=$OUT
export VLLM_BACKPORT_SM_TABLE=.devcarry/head/sm_table.json
. tools/bench/device_run_lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
batches=1,2,4,8,16,17,24,32,48,64
gemm=""
for step in 1-m0 1-m1 2-m1 2-m0; do
  build=${step#*-} dir=.devcarry/${step#*-}
  [ $build = m1 ] && dir=.devcarry/head
  for sm in sm80 sm89; do
    run decode-$step-$sm env VLLM_BACKPORT_KERNELS_DIR=$dir timeout 90 python3 tools/bench/sm8x_ptx_bench.py \
      --sm-table $VLLM_BACKPORT_SM_TABLE --kernel-so $dir/libvllm_backport_kernels_$sm.so --only "engine row" \
      --sms $sm --batches $batches --no-prefill $gemm --out $OUT/decode-$step-$sm.json
    gemm=--no-gemm
  done
done
tar -C $OUT -czf $final/call83.tgz .
