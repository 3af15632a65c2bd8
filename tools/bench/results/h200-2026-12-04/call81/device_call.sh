#!/usr/bin/env bash
# Call 81: the committed gathers (Bazel's libraries of main's HEAD in .devcarry/head): their GPU
# tests and fp8_ds_mla_bench.py from sm80, sm86 and sm89 PTX at 4K-256K rows, timed as in call 47
# (L2 flushed before each run) and with the indices / page table read back into the L2 after the
# flush, as they are in vLLM (ColdRowsTimer), each against a same-size copy timed the same way.
set -u
final=$OUT
OUT=$(mktemp -d)
export VLLM_BACKPORT_SM_TABLE=.devcarry/head/sm_table.json VLLM_BACKPORT_KERNELS_DIR=.devcarry/head
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
BENCH_ARGS="--no-sweep --tokens 4096 8192 16384 32768 65536 131072 262144 --repeats 9" \
  TESTS="fp8_ds_mla_gpu_test fp8_ds_mla_cuda_gather_gpu_test dequant_gather_paged_gpu_test" \
  timeout 540 tools/bench/fp8_ds_mla_device_run.sh $OUT/run sm80 sm86 sm89
cat $OUT/run/summary.txt
grep -h "dequant_gather\|paged_gather" $OUT/run/sm*-ptx/results.md | grep "CUDA op"
tar -C $OUT -czf $final/call81.tgz .
