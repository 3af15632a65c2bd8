#!/usr/bin/env bash
# One device call for the fp8_ds_mla kernels: the GPU tests, then fp8_ds_mla_bench.py, from each
# SM's kernel library (the CUDA gathers run from that SM's PTX; the Triton rows are this card's
# JIT code), logs and results under OUT.
#
# usage (repo root): VLLM_BACKPORT_SM_TABLE=<built sm_table.json> \
#   VLLM_BACKPORT_KERNELS_DIR=<folder with libvllm_backport_kernels_<sm>.so> \
#   tools/bench/fp8_ds_mla_device_run.sh OUT [sm80 sm86 sm89]
# Optional: BENCH_ARGS (extra fp8_ds_mla_bench.py arguments, e.g. "--no-sweep"); TESTS (the test
# files of tests/kernels to run per SM, default all three below; "" runs none).
set -u
out=${1:?usage: fp8_ds_mla_device_run.sh OUT [sms...]}
shift
sms=${*:-sm80 sm86 sm89}
. "$(dirname "${BASH_SOURCE[0]}")/device_run_lib.sh"
for sm in $sms; do
  for t in ${TESTS-fp8_ds_mla_gpu_test fp8_ds_mla_cuda_gather_gpu_test dequant_gather_paged_gpu_test}; do
    run "test-$sm-$t" env VLLM_BACKPORT_TARGET="$sm" python3 "$repo/tests/kernels/$t.py"
  done
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
  run "bench-$sm" env VLLM_BACKPORT_TARGET="$sm" python3 "$repo/tools/bench/fp8_ds_mla_bench.py" \
    --out "$out/$sm-ptx" ${BENCH_ARGS:-}
done
exit $status
