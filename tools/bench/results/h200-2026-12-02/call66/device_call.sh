#!/usr/bin/env bash
# Output stores staged through shared memory (decode) against the committed decode.
set -u
export VLLM_BACKPORT_SM_TABLE=.devcarry/base/sm_table.json
export PYTHONPATH=$PWD:$PWD/engine
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
NO_PREFILL=1 ROUNDS=2 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b80 .devcarry/base .devcarry/stage sm80 > $OUT/b80.out 2>&1
NO_PREFILL=1 ROUNDS=1 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b89 .devcarry/base .devcarry/stage sm89 > $OUT/b89.out 2>&1
NO_PREFILL=1 NO_HOST=1 ROUNDS=1 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b86 .devcarry/base .devcarry/stage sm86 > $OUT/b86.out 2>&1
for build in base stage; do
  VLLM_BACKPORT_TARGET=sm80 VLLM_BACKPORT_KERNELS_DIR=.devcarry/$build timeout 120 python3 tools/bench/sparse_mla_locality_bench.py --out $OUT/loc-$build.json > $OUT/loc-$build.log 2>&1
done
NCU=${NCU:-ncu}  # Nsight Compute's command line, from the device's CUDA toolkit
VLLM_BACKPORT_TARGET=sm80 timeout 100 $NCU --kernel-name regex:sparse_decode --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats -o $OUT/prof-stage \
  python3 tools/bench/sparse_decode_once.py --kernel-so .devcarry/stage/libvllm_backport_kernels_sm80.so > $OUT/prof.log 2>&1
$NCU --import $OUT/prof-stage.ncu-rep --page source --csv --print-source sass > $OUT/sass-stage.csv 2>&1
rm -f $OUT/prof-stage.ncu-rep
cat $OUT/b80/summary.txt $OUT/b89/summary.txt $OUT/b86/summary.txt
tar czf $OUT/all.tgz -C $OUT --exclude all.tgz b80 b86 b89 b80.out b86.out b89.out gpu.txt loc-base.json loc-stage.json loc-base.log loc-stage.log sass-stage.csv prof.log
