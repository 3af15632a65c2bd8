#!/usr/bin/env bash
# One device call for DeepSeek-V4's attention-side sm8x ops: the GPU tests for each SM row, then
# the benches (this card's own code, then each SM's PTX), logs and results under OUT.
#
# usage (repo root): VLLM_BACKPORT_SM_TABLE=<built sm_table.json> tools/bench/dsv4_attention_device_run.sh OUT \
#                    [tests|benches|all] [sm80 sm86 sm89]
# Optional: VLLM_BACKPORT_KERNELS_DIR=<folder with libvllm_backport_kernels_<sm>.so> (else Triton JIT).
set -u
out=${1:?usage: dsv4_attention_device_run.sh OUT [tests|benches|all] [sms...]}
what=${2:-all}
shift $(( $# < 2 ? $# : 2 ))
sms=${*:-sm80 sm86 sm89}
. "$(dirname "${BASH_SOURCE[0]}")/device_run_lib.sh"
if [ "$what" != benches ]; then
  for sm in $sms; do
    for t in compressor/gpu_test o_proj/gpu_test mhc/gpu_test dequant_gather_paged_gpu_test indexer/gpu_test \
             dsv4_composition_test; do
      run "test-$sm-${t//\//-}" env VLLM_BACKPORT_TARGET="$sm" python3 "$repo/tests/kernels/$t.py"
    done
  done
fi
if [ "$what" != tests ]; then
  for b in compressor o_proj mhc indexer; do
    run "bench-$b-native" env VLLM_BACKPORT_TARGET=sm80 python3 "$repo/tools/bench/${b}_bench.py" --out "$out/native"
    for sm in $sms; do
      run "bench-$b-$sm-ptx" python3 "$repo/tools/bench/${b}_bench.py" --out "$out/$sm-ptx" --ptx "$sm"
    done
  done
fi
exit $status
