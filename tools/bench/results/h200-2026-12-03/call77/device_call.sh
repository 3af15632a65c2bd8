#!/usr/bin/env bash
# The split merge inside the decode's own blocks (cooperative launch, grid-wide barrier) against
# the separate merge kernel, same sources: m1 = default build, m0 = -DVBK_MERGE_IN_KERNEL=0
# (tools/bench/kernel_variant.sh .devcarry/m1 | .devcarry/m0 -DVBK_MERGE_IN_KERNEL=0).
# GPU tests of m1 from sm80/86/89 PTX; each kernel's own time and the graph time at the split
# rows (sm80); engine rows m0, m1, m0, m1 (sm80) and m0, m1 (sm86, sm89); host bench (sm80).
set -u
final=$OUT
OUT=$(mktemp -d)  # results go to a scratch folder, then one tarball (the device returns few files)
export VLLM_BACKPORT_SM_TABLE=.devcarry/m1/sm_table.json
export PYTHONPATH=$PWD:$PWD/engine
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
for sm in sm80 sm86 sm89; do
  VLLM_BACKPORT_KERNELS_DIR=.devcarry/m1 VLLM_BACKPORT_TARGET=$sm timeout 150 \
    python3 tests/kernels/sparse_mla/gpu_test.py > $OUT/sparse-gpu-m1-$sm.log 2>&1
  echo "gpu tests $sm rc $?"
done
shapes="1x64:16 8x64:16 32x64:4 48x64:2 64x64:2 1x128:16 8x128:8 17x128:3 32x128:2 64x128:1"
for build in m0 m1; do
  VLLM_BACKPORT_TARGET=sm80 timeout 150 python3 tools/bench/sparse_mla_split_cost_bench.py \
    --kernel-so .devcarry/$build/libvllm_backport_kernels_sm80.so --out $OUT/split-cost-$build-sm80.json \
    --shapes $shapes > $OUT/split-cost-$build-sm80.log 2>&1
  echo "split cost $build rc $?"
done
gemm=""
rows() {  # rows BUILD SM NAME
  timeout 100 python3 tools/bench/sm8x_ptx_bench.py --sm-table $VLLM_BACKPORT_SM_TABLE \
    --kernel-so .devcarry/$1/libvllm_backport_kernels_$2.so --only "engine row" $gemm --sms $2 --no-prefill \
    --batches 1,8,17,32,34,48,64 --out $OUT/$3.json > $OUT/$3.log 2>&1
  echo "$3 rc $?"; gemm=--no-gemm
}
for round in 1 2; do for build in m0 m1; do rows $build sm80 decode-$build-sm80-$round; done; done
for sm in sm86 sm89; do for build in m0 m1; do rows $build $sm decode-$build-$sm; done; done
for round in 1 2; do
  for build in m0 m1; do
    VLLM_BACKPORT_KERNELS_DIR=.devcarry/$build VLLM_BACKPORT_TARGET=sm80 timeout 120 \
      python3 tools/bench/sparse_mla_host_bench.py --breakdown --out $OUT/host-$build-sm80-$round.json \
      > $OUT/host-$build-sm80-$round.log 2>&1
    echo "host $build $round rc $?"
  done
done
grep -h "Ran\|OK\|FAIL\|Error\|worst" $OUT/sparse-gpu-m1-*.log | head -30
tar -C $OUT -czf $final/call77.tgz .
