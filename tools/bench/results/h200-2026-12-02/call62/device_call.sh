#!/usr/bin/env bash
# Two blocks per SM (32 heads x 16-slot tiles) against the committed decode; occupancy; ncu.
set -u
export VLLM_BACKPORT_SM_TABLE=.devcarry/base/sm_table.json
export PYTHONPATH=$PWD:$PWD/engine
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
for sm in sm80 sm89; do
  NO_HOST=1 NO_PREFILL=1 ROUNDS=2 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b${sm#sm} .devcarry/base .devcarry/new $sm > $OUT/b${sm#sm}.out 2>&1
done
NO_HOST=1 NO_PREFILL=1 ROUNDS=1 BATCHES=1,8,32,64 tools/bench/sparse_mla_ab_device_run.sh $OUT/b86 .devcarry/base .devcarry/new sm86 > $OUT/b86.out 2>&1
for build in base new; do
  VLLM_BACKPORT_TARGET=sm80 VLLM_BACKPORT_KERNELS_DIR=.devcarry/$build timeout 120 python3 tools/bench/sparse_mla_locality_bench.py --out $OUT/loc-$build.json > $OUT/loc-$build.log 2>&1
done
timeout 60 python3 tools/bench/sparse_decode_once.py --kernel-so .devcarry/occ/libvllm_backport_kernels_sm80.so > $OUT/occ.log 2>&1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for build in base new; do
  timeout 150 $NCU --kernel-name regex:sparse_decode --launch-skip 1 --launch-count 1 \
    --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section SpeedOfLight \
    python3 tools/bench/sparse_decode_once.py --kernel-so .devcarry/$build/libvllm_backport_kernels_sm80.so > $OUT/ncu-$build.txt 2>&1
done
tar czf $OUT/all.tgz -C $OUT --exclude all.tgz .
