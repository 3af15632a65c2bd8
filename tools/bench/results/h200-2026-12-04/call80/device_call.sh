#!/usr/bin/env bash
# Call 80: the committed build alone (Bazel's libraries of main's HEAD in .devcarry/head), as #16's
# closing record: the sparse MLA GPU tests, the engine's decode rows at batch 1-128 (the batch sizes
# every split count takes on this card) with the prefill shapes and the mma.sync ceiling, and the
# host-path bench (1- and 6-token rows, batch 1 and 64), each from sm80, sm86 and sm89 PTX.
set -u
final=$OUT
OUT=$(mktemp -d)  # results go to a scratch folder, then one tarball (the device returns few files)
export VLLM_BACKPORT_SM_TABLE=.devcarry/head/sm_table.json VLLM_BACKPORT_KERNELS_DIR=.devcarry/head
out=$OUT
. tools/bench/device_run_lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
batches=1,2,4,8,16,17,24,32,34,44,48,64,96,128
gemm=""
for sm in sm80 sm86 sm89; do
  run sparse-gpu-$sm env VLLM_BACKPORT_TARGET=$sm timeout 150 python3 tests/kernels/sparse_mla/gpu_test.py
  run decode-$sm timeout 90 python3 tools/bench/sm8x_ptx_bench.py --sm-table $VLLM_BACKPORT_SM_TABLE \
    --kernel-so .devcarry/head/libvllm_backport_kernels_$sm.so --only "engine row" $gemm --sms $sm \
    --batches $batches --out $OUT/decode-$sm.json
  gemm=--no-gemm
  run host-$sm env VLLM_BACKPORT_TARGET=$sm timeout 60 python3 tools/bench/sparse_mla_host_bench.py --breakdown \
    --out $OUT/host-$sm.json
done
grep -h "Ran\|^OK\|FAIL\|worst" $OUT/sparse-gpu-*.log | head -20
tar -C $OUT -czf $final/call80.tgz .
