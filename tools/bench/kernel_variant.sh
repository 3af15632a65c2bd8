#!/usr/bin/env bash
# Builds the three kernel libraries of the working tree with extra nvcc flags (say -DNAME=VALUE
# for a variant of a kernel constant), for an A/B device call against the committed build
# (tools/bench/device_run.sh sparse_mla_ab OUT BASE_DIR OUT_DIR): replays
# the nvcc command Bazel recorded for //kernels:kernels_sm86 (its output group nvcc_args) for each
# SM of the SM table (sm_table.json), with the same toolchain, torch headers and Triton AOT
# sources. Not hermetic (the outputs are not Bazel's); only for benchmarks.
#
# usage (repo root): tools/bench/kernel_variant.sh OUT_DIR [nvcc flags...]
# OUT_DIR gets libvllm_backport_kernels_<sm>.so per SM and sm_table.json.
set -euo pipefail
out=$(mkdir -p "${1:?usage: kernel_variant.sh OUT_DIR [nvcc flags...]}" && cd "$1" && pwd)
shift
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
./bazelw build //kernels:kernels_sm86_nvcc_args //kernels:all >/dev/null
exec_root=$(./bazelw info execution_root 2>/dev/null)
bin=$(./bazelw info bazel-bin 2>/dev/null)
cp "$bin/kernels/sm_table.json" "$out/"
# Each SM's compute capability, as "sm80 80" lines.
mapfile -t rows < <(python3 -c 'import json, sys
for name, row in json.load(open(sys.argv[1])).items(): print(name, row["capability"])' "$out/sm_table.json")
for row in "${rows[@]}"; do
  read -r name cc <<<"$row"
  # The sm86 command, retargeted: gencode, Triton AOT source and output name.
  mapfile -t args < <(sed -e "s/compute_86/compute_$cc/g; s/sm_86/sm_$cc/g; s/sm86/$name/g" \
    "$bin/kernels/kernels_sm86.nvcc_args")
  replay=()
  for a in "${args[@]}"; do
    case "$a" in
      kernels/csrc/*) replay+=("$repo/$a") ;;  # the working tree's sources
      -I.) replay+=("-I$repo") ;;
      bazel-out/*/libvllm_backport_kernels_*.so) replay+=("$out/libvllm_backport_kernels_$name.so") ;;
      *) replay+=("$a") ;;
    esac
  done
  (cd "$exec_root" && external/cuda/nvidia/cu13/bin/nvcc "${replay[@]}" "$@")
done
ls -l "$out"
