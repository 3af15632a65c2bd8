#!/usr/bin/env bash
# Call 77's in-kernel split merge, second form: a warp per (token, head) row (weights once per
# row and lane) and helper blocks up to the card's co-resident count. Same A/B as call 77 (m1 =
# default build, m0 = -DVBK_MERGE_IN_KERNEL=0, same sources), trimmed to the session's device time:
# GPU tests of m1 (sm80 PTX), split-cost rows (sm80) and the host bench once per build.
set -u
final=$OUT
OUT=$(mktemp -d)  # results go to a scratch folder, then one tarball (the device returns few files)
export VLLM_BACKPORT_SM_TABLE=.devcarry/m1/sm_table.json
export PYTHONPATH=$PWD:$PWD/engine
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/gpu.txt 2>&1
VLLM_BACKPORT_KERNELS_DIR=.devcarry/m1 VLLM_BACKPORT_TARGET=sm80 timeout 130 \
  python3 tests/kernels/sparse_mla/gpu_test.py > $OUT/sparse-gpu-m1-sm80.log 2>&1
echo "gpu tests sm80 rc $?"
shapes="1x64:16 8x64:16 32x64:4 48x64:2 64x64:2 1x128:16 8x128:8 17x128:3 32x128:2"
for build in m0 m1; do
  VLLM_BACKPORT_TARGET=sm80 timeout 60 python3 tools/bench/sparse_mla_split_cost_bench.py \
    --kernel-so .devcarry/$build/libvllm_backport_kernels_sm80.so --out $OUT/split-cost-$build-sm80.json \
    --shapes $shapes > $OUT/split-cost-$build-sm80.log 2>&1
  echo "split cost $build rc $?"
done
for build in m0 m1; do
  VLLM_BACKPORT_KERNELS_DIR=.devcarry/$build VLLM_BACKPORT_TARGET=sm80 timeout 40 \
    python3 tools/bench/sparse_mla_host_bench.py --breakdown --out $OUT/host-$build-sm80.json \
    > $OUT/host-$build-sm80.log 2>&1
  echo "host $build rc $?"
done
grep -h "Ran\|OK\|FAIL\|Error\|worst" $OUT/sparse-gpu-m1-*.log | head -30
tar -C $OUT -czf $final/call78.tgz .
