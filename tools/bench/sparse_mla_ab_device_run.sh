#!/usr/bin/env bash
# One device call comparing two builds of the kernel libraries (say, the last commit's and the
# working tree's) on the same card in the same call, alternating: GPU tests of the new build from
# every SM's PTX, then for each SM the engine rows (decode b1/b8/b64, prefill 8K-64K; the mma.sync
# ceiling once) and the host-path bench (6-token decode, eager wall time) of base, new, base, new.
# Logs and JSON under OUT (<step>-<build>-<sm>[-<round>]).
#
# usage (repo root): VLLM_BACKPORT_SM_TABLE=<built sm_table.json> \
#   tools/bench/sparse_mla_ab_device_run.sh OUT BASE_DIR NEW_DIR [sm80 sm86 sm89]
# BASE_DIR / NEW_DIR: folders holding libvllm_backport_kernels_<sm>.so. ROUNDS (default 2);
# NO_HOST=1 leaves the host bench out, NO_PREFILL=1 the prefill rows; BATCHES (say 1,8,32,64)
# sets the decode batch sizes.
set -u
out=${1:?usage: sparse_mla_ab_device_run.sh OUT BASE_DIR NEW_DIR [sms...]}
base=${2:?BASE_DIR}
new=${3:?NEW_DIR}
shift 3
sms=${*:-sm80 sm86 sm89}
. "$(dirname "${BASH_SOURCE[0]}")/device_run_lib.sh"
for sm in $sms; do
  run "sparse-gpu-new-$sm" env VLLM_BACKPORT_KERNELS_DIR="$new" VLLM_BACKPORT_TARGET="$sm" \
    python3 "$repo/tests/kernels/sparse_mla/gpu_test.py"
done
gemm=""
for sm in $sms; do
  for round in $(seq "${ROUNDS:-2}"); do
    for build in base new; do
      dir=$base; [ "$build" = new ] && dir=$new
      run "decode-$build-$sm-$round" python3 "$repo/tools/bench/sm8x_ptx_bench.py" --sm-table "$VLLM_BACKPORT_SM_TABLE" \
        --kernel-so "$dir/libvllm_backport_kernels_$sm.so" --only "engine row" $gemm --sms "$sm" \
        --out "$out/decode-$build-$sm-$round.json" ${NO_PREFILL:+--no-prefill} ${BATCHES:+--batches "$BATCHES"}
      gemm=--no-gemm
      [ "${NO_HOST:-0}" = 1 ] && continue
      run "host-$build-$sm-$round" env VLLM_BACKPORT_KERNELS_DIR="$dir" VLLM_BACKPORT_TARGET="$sm" \
        python3 "$repo/tools/bench/sparse_mla_host_bench.py" --out "$out/host-$build-$sm-$round.json"
    done
  done
done
exit $status
