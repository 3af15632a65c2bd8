#!/usr/bin/env bash
# One device call for sparse MLA: its GPU correctness test, then the engine rows' bench (decode GPU
# time per batch and the prefill shapes, with the sm80 mma.sync ceiling measured in the same run),
# the Triton rows' bench for comparison (triton-<sm>.json) and the host-path bench (eager wall time
# against GPU time), each from every SM's PTX. Logs and JSON under OUT; decode-<sm>.json has the
# layout of results/sparse-mla-cuda-decode-<sm>-ptx-h200.json. NO_HOST=1 leaves the host bench out.
#
# usage (repo root): VLLM_BACKPORT_SM_TABLE=<built sm_table.json> VLLM_BACKPORT_KERNELS_DIR=<folder with
#                    libvllm_backport_kernels_<sm>.so> tools/bench/sparse_mla_device_run.sh OUT [sm80 sm86 sm89]
set -u
out=${1:?usage: sparse_mla_device_run.sh OUT [sms...]}
shift
sms=${*:-sm80 sm86 sm89}
: "${VLLM_BACKPORT_KERNELS_DIR:?set VLLM_BACKPORT_KERNELS_DIR to the folder of the built kernel libraries}"
. "$(dirname "${BASH_SOURCE[0]}")/device_run_lib.sh"
gemm=""
for sm in $sms; do
  run "sparse-gpu-$sm" env VLLM_BACKPORT_TARGET="$sm" python3 "$repo/tests/kernels/sparse_mla/gpu_test.py"
  # The mma.sync ceiling once (the first SM), the engine rows for each.
  run "decode-$sm" python3 "$repo/tools/bench/sm8x_ptx_bench.py" --sm-table "$VLLM_BACKPORT_SM_TABLE" \
    --kernel-so "$VLLM_BACKPORT_KERNELS_DIR/libvllm_backport_kernels_$sm.so" --only "engine row" \
    $gemm --sms "$sm" --out "$out/decode-$sm.json"
  gemm=--no-gemm
  run "triton-$sm" python3 "$repo/tools/bench/sm8x_ptx_bench.py" --sm-table "$VLLM_BACKPORT_SM_TABLE" \
    --kernel-so "$VLLM_BACKPORT_KERNELS_DIR/libvllm_backport_kernels_$sm.so" --only "triton two-stage" \
    --no-gemm --sms "$sm" --out "$out/triton-$sm.json"
  [ "${NO_HOST:-0}" = 1 ] && continue
  run "host-$sm" env VLLM_BACKPORT_TARGET="$sm" python3 "$repo/tools/bench/sparse_mla_host_bench.py" --breakdown \
    --out "$out/host-$sm.json"
done
exit $status
