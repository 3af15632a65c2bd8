#!/usr/bin/env bash
# Call 84: the decode's merge chosen by capture (new = the working tree through Bazel, in
# .devcarry/new: in-kernel merge for eager calls at 4-16 splits, split_merge_kernel under CUDA-graph
# capture). GPU tests from sm80 and sm89 PTX (among them: a captured call takes the merge kernel and
# gives the eager call's bytes); engine rows (graph replays) against m0 (.devcarry/m0, merge kernel
# always, call 83) in A B B A order from sm80 PTX; the host bench (eager) from sm80 PTX.
set -u
final=$OUT
OUT=$(mktemp -d)
out=$OUT
export VLLM_BACKPORT_SM_TABLE=.devcarry/new/sm_table.json
. tools/bench/device_run_lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
for sm in sm80 sm89; do
  run sparse-gpu-new-$sm env VLLM_BACKPORT_KERNELS_DIR=.devcarry/new VLLM_BACKPORT_TARGET=$sm timeout 150 \
    python3 tests/kernels/sparse_mla/gpu_test.py
done
gemm=""
for step in 1-m0 1-new 2-new 2-m0; do
  dir=.devcarry/${step#*-}
  run decode-$step-sm80 env VLLM_BACKPORT_KERNELS_DIR=$dir timeout 90 python3 tools/bench/sm8x_ptx_bench.py \
    --sm-table $VLLM_BACKPORT_SM_TABLE --kernel-so $dir/libvllm_backport_kernels_sm80.so --only "engine row" \
    --sms sm80 --batches 1,2,4,8,16,17,24,32,64 --no-prefill $gemm --out $OUT/decode-$step-sm80.json
  gemm=--no-gemm
done
run host-new-sm80 env VLLM_BACKPORT_KERNELS_DIR=.devcarry/new VLLM_BACKPORT_TARGET=sm80 timeout 60 \
  python3 tools/bench/sparse_mla_host_bench.py --breakdown --out $OUT/host-new-sm80.json
grep -h "Ran\|^OK\|FAIL\|Error\|worst" $OUT/sparse-gpu-new-*.log | head -30
tar -C $OUT -czf $final/call84.tgz .
