#!/usr/bin/env bash
# The committed decode (b5443c9, Bazel-built) against ce75c09's libraries over the batch sizes call 68
# did not run (2 to 128), decode rows only, two rounds per SM, base and new alternating.
set -u
export VLLM_BACKPORT_SM_TABLE=.devcarry/two0/sm_table.json
out=$OUT/sweep
. tools/bench/device_run_lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
gemm=""
for round in 1 2; do
  for sm in sm80 sm86 sm89; do
    for build in base new; do
      dir=.devcarry/base; [ $build = new ] && dir=.devcarry/new
      run "decode-$build-$sm-$round" python3 tools/bench/sm8x_ptx_bench.py --sm-table "$VLLM_BACKPORT_SM_TABLE" \
        --kernel-so "$dir/libvllm_backport_kernels_$sm.so" --only "engine row" $gemm --sms $sm --no-prefill \
        --batches 2,4,16,24,48,96,128 --out "$out/decode-$build-$sm-$round.json"
      gemm=--no-gemm
    done
  done
done
cat $out/summary.txt
tar czf /tmp/all.tgz -C $OUT . && mv /tmp/all.tgz $OUT/
