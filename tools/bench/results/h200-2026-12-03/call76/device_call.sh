#!/usr/bin/env bash
# The decode's host path, A/B against 0779eae (engine Python and kernel libraries of each commit):
# GPU tests of the new build from sm80 and sm89 PTX (sm86 last, in the time left); the host bench
# (eager wall time over GPU time, with --breakdown) of base, new, base, new on sm80 (2 rounds) and
# sm89 (1 round) as the scheduler places the process, then on sm80 pinned with taskset to one core
# of the GPU's own NUMA node (2 rounds), to tell the call's cost from the host's placement.
# Needs .devcarry/base (0779eae's libraries, tools/bench/kernel_variant.sh at that commit),
# .devcarry/new (this tree's) and .devcarry/base_tree (git archive of 0779eae).
set -u
final=$OUT
OUT=$(mktemp -d)  # results go to a scratch folder, then one tarball (the device returns few files)
export VLLM_BACKPORT_SM_TABLE=.devcarry/new/sm_table.json
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,pci.bus_id --format=csv > $OUT/gpu.txt 2>&1
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | sed 's/^0000//')
local_cpus=$(cat /sys/bus/pci/devices/$bus/local_cpulist 2>/dev/null || echo 0)
core=$(echo "$local_cpus" | cut -d, -f1 | cut -d- -f1)
{ echo "gpu $bus local cpus $local_cpus, pinned runs on core $core"; lscpu | grep -i "model name\|^cpu(s)\|numa node"; } \
  >> $OUT/gpu.txt 2>&1
gpu_tests() {  # gpu_tests SM SECONDS
  PYTHONPATH=$PWD:$PWD/engine VLLM_BACKPORT_KERNELS_DIR=.devcarry/new VLLM_BACKPORT_TARGET=$1 \
    timeout $2 python3 tests/kernels/sparse_mla/gpu_test.py > $OUT/sparse-gpu-new-$1.log 2>&1
  echo "gpu tests $1 rc $?"
}
gpu_tests sm80 150
gpu_tests sm89 150
host() {  # host BUILD SM NAME [taskset prefix...]
  local build=$1 sm=$2 name=$3; shift 3
  local tree=$PWD; [ "$build" = base ] && tree=$PWD/.devcarry/base_tree
  PYTHONPATH=$tree:$tree/engine VLLM_BACKPORT_KERNELS_DIR=.devcarry/$build VLLM_BACKPORT_TARGET=$sm \
    timeout 120 "$@" python3 $tree/tools/bench/sparse_mla_host_bench.py --breakdown --out $OUT/$name.json \
    > $OUT/$name.log 2>&1
  echo "$name rc $?"
}
for round in 1 2; do
  for build in base new; do host $build sm80 host-$build-sm80-$round; done
done
for build in base new; do host $build sm89 host-$build-sm89-1; done
for round in 1 2; do
  for build in base new; do host $build sm80 host-pinned-$build-sm80-$round taskset -c "$core"; done
done
gpu_tests sm86 $((575 - SECONDS))  # last, in the call's remaining time
grep -h "Ran\|OK\|FAIL\|Error" $OUT/sparse-gpu-new-*.log | head -20
tar -C $OUT -czf $final/call76.tgz .
