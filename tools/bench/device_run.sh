#!/usr/bin/env bash
# One device call (the GPU machine has no Bazel: run from a source tree with the built SM table and
# kernel libraries beside it): a subject's GPU tests, then its benches from every SM's code. Logs and
# JSON under OUT; each step appends "PASS|FAIL NAME SECONDS" to OUT/summary.txt, and the call still
# runs every step after a failure (exit 1 then).
#
# usage (repo root): VLLM_BACKPORT_SM_TABLE=<bazel-bin/kernels/sm_table.json> \
#   VLLM_BACKPORT_KERNELS_DIR=<folder with libvllm_backport_kernels_<sm>.so> \
#   tools/bench/device_run.sh SUBJECT OUT [SM...]   (default: every row of the SM table)
#
# SUBJECT:
#   sparse_mla  GPU test, then per SM: sparse_mla_bench.py engine (decode b1/b8/b64 and prefill
#               8K-64K, the mma.sync ceiling once), the Triton rows (triton-<sm>.json) and
#               sparse_mla_bench.py host --breakdown. NO_HOST=1 leaves the host bench out.
#   sparse_mla_ab BASE_DIR NEW_DIR  (after OUT) two builds of the kernel libraries in one call:
#               GPU test of NEW, then per SM and round the engine rows and the host bench of base,
#               new. ROUNDS (default 2), NO_HOST=1, NO_PREFILL=1, BATCHES (say 1,8,32,64).
#               tools/bench/kernel_variant.sh builds a NEW_DIR with extra nvcc flags.
#   fp8_ds_mla  per SM: the gathers' GPU tests (TESTS overrides the list, "" runs none), then
#               fp8_ds_mla_bench.py (BENCH_ARGS adds arguments, e.g. "--no-sweep").
#   dsv4_ops    per SM: the GPU tests of compressor, o_proj, the fp8 linear, mHC, the paged gather, the indexer and
#               the DeepSeek-V4 composition, then compressor/o_proj/mhc/indexer benches as this
#               card's own code (native/) and from each SM's PTX (<sm>-ptx/). WHAT=tests|benches.
#   glm_ops     GLM-5.3's route kernels: per SM, the GPU tests of fwht128_quant_fp8 and the key-pool
#               compress / decode update (each from that SM's PTX and Triton's JIT; against upstream's
#               kernels where this GPU has Triton e4m3 and KPOOL_UPSTREAM_FILE or vLLM provides them),
#               then glm_ops_bench.py as this card's own code (native/) and from each SM's PTX
#               (<sm>-ptx/). WHAT=tests|benches.
set -u
subject=${1:?usage: device_run.sh SUBJECT OUT [sms...] (see the header)}
out=${2:?usage: device_run.sh SUBJECT OUT [sms...]}
shift 2
if [ "$subject" = sparse_mla_ab ]; then
  base=${1:?usage: device_run.sh sparse_mla_ab OUT BASE_DIR NEW_DIR [sms...]}
  new=${2:?NEW_DIR}
  shift 2
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PYTHONPATH=$repo:$repo/engine
: "${VLLM_BACKPORT_SM_TABLE:?set VLLM_BACKPORT_SM_TABLE to the built sm_table.json (bazel-bin/kernels/sm_table.json)}"
# The SM table's rows, oldest first; the first also runs the benches as this card's own code.
table_sms=$(python3 -c 'import json, os
t = json.load(open(os.environ["VLLM_BACKPORT_SM_TABLE"]))
print(" ".join(sorted(t, key=lambda sm: t[sm]["capability"])))') || exit 2
oldest=${table_sms%% *}
sms=${*:-$table_sms}
mkdir -p "$out"
status=0
# run NAME COMMAND...: the command's output in $out/NAME.log, its verdict in $out/summary.txt.
run() {
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$out/$name.log" 2>&1; then r=PASS; else r=FAIL; status=1; fi
  echo "$r $name $((SECONDS - t0))s" | tee -a "$out/summary.txt"
}
bench() { python3 "$repo/tools/bench/$1" "${@:2}"; }
lib() { echo "$1/libvllm_backport_kernels_$2.so"; }

case "$subject" in
sparse_mla)
  : "${VLLM_BACKPORT_KERNELS_DIR:?set VLLM_BACKPORT_KERNELS_DIR to the folder of the built kernel libraries}"
  gemm=""
  for sm in $sms; do
    run "sparse-gpu-$sm" env VLLM_BACKPORT_TARGET="$sm" python3 "$repo/tests/kernels/sparse_mla/gpu_test.py"
    # The mma.sync ceiling once (the first SM), the engine rows for each.
    run "decode-$sm" bench sparse_mla_bench.py engine --sm-table "$VLLM_BACKPORT_SM_TABLE" \
      --kernel-so "$(lib "$VLLM_BACKPORT_KERNELS_DIR" "$sm")" --only "engine row" $gemm --sms "$sm" \
      --out "$out/decode-$sm.json"
    gemm=--no-gemm
    run "triton-$sm" bench sparse_mla_bench.py engine --sm-table "$VLLM_BACKPORT_SM_TABLE" \
      --kernel-so "$(lib "$VLLM_BACKPORT_KERNELS_DIR" "$sm")" --only "triton two-stage" --no-gemm --sms "$sm" \
      --out "$out/triton-$sm.json"
    [ "${NO_HOST:-0}" = 1 ] && continue
    run "host-$sm" env VLLM_BACKPORT_TARGET="$sm" python3 "$repo/tools/bench/sparse_mla_bench.py" host --breakdown \
      --out "$out/host-$sm.json"
  done ;;
sparse_mla_ab)
  for sm in $sms; do
    run "sparse-gpu-new-$sm" env VLLM_BACKPORT_KERNELS_DIR="$new" VLLM_BACKPORT_TARGET="$sm" \
      python3 "$repo/tests/kernels/sparse_mla/gpu_test.py"
  done
  gemm=""
  for sm in $sms; do
    for round in $(seq "${ROUNDS:-2}"); do
      for build in base new; do
        dir=$base; [ "$build" = new ] && dir=$new
        # shellcheck disable=SC2086  # $gemm is an optional flag
        run "decode-$build-$sm-$round" bench sparse_mla_bench.py engine --sm-table "$VLLM_BACKPORT_SM_TABLE" \
          --kernel-so "$(lib "$dir" "$sm")" --only "engine row" $gemm --sms "$sm" \
          --out "$out/decode-$build-$sm-$round.json" ${NO_PREFILL:+--no-prefill} ${BATCHES:+--batches "$BATCHES"}
        gemm=--no-gemm
        [ "${NO_HOST:-0}" = 1 ] && continue
        run "host-$build-$sm-$round" env VLLM_BACKPORT_KERNELS_DIR="$dir" VLLM_BACKPORT_TARGET="$sm" \
          python3 "$repo/tools/bench/sparse_mla_bench.py" host --out "$out/host-$build-$sm-$round.json"
      done
    done
  done ;;
fp8_ds_mla)
  for sm in $sms; do
    for t in ${TESTS-fp8_ds_mla_gpu_test fp8_ds_mla_cuda_gather_gpu_test dequant_gather_paged_gpu_test}; do
      run "test-$sm-$t" env VLLM_BACKPORT_TARGET="$sm" python3 "$repo/tests/kernels/$t.py"
    done
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
    run "bench-$sm" env VLLM_BACKPORT_TARGET="$sm" python3 "$repo/tools/bench/fp8_ds_mla_bench.py" \
      --out "$out/$sm-ptx" ${BENCH_ARGS:-}
  done ;;
dsv4_ops)
  what=${WHAT:-all}
  if [ "$what" != benches ]; then
    for sm in $sms; do
      for t in compressor/gpu_test o_proj/gpu_test fp8_linear/gpu_test mhc/gpu_test dequant_gather_paged_gpu_test \
               indexer/gpu_test dsv4_composition_test; do
        run "test-$sm-${t//\//-}" env VLLM_BACKPORT_TARGET="$sm" python3 "$repo/tests/kernels/$t.py"
      done
    done
  fi
  if [ "$what" != tests ]; then
    for b in compressor o_proj mhc indexer; do
      run "bench-$b-native" env VLLM_BACKPORT_TARGET="$oldest" python3 "$repo/tools/bench/${b}_bench.py" --out "$out/native"
      for sm in $sms; do
        run "bench-$b-$sm-ptx" bench "${b}_bench.py" --out "$out/$sm-ptx" --ptx "$sm"
      done
    done
  fi ;;
glm_ops)
  what=${WHAT:-all}
  if [ "$what" != benches ]; then
    for sm in $sms; do
      for t in fwht_quant/gpu_test kpool/gpu_test; do
        run "test-$sm-${t//\//-}" env VLLM_BACKPORT_TARGET="$sm" python3 "$repo/tests/kernels/$t.py"
      done
    done
  fi
  if [ "$what" != tests ]; then
    run "bench-glm-native" env VLLM_BACKPORT_TARGET="$oldest" python3 "$repo/tools/bench/glm_ops_bench.py" --out "$out/native"
    for sm in $sms; do
      run "bench-glm-$sm-ptx" bench glm_ops_bench.py --out "$out/$sm-ptx" --ptx "$sm"
    done
  fi ;;
*)
  echo "device_run.sh: unknown subject $subject (sparse_mla, sparse_mla_ab, fp8_ds_mla, dsv4_ops, glm_ops)" >&2
  exit 2 ;;
esac
exit $status
