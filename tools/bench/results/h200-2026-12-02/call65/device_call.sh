#!/usr/bin/env bash
set -u
export VLLM_BACKPORT_SM_TABLE=.devcarry/base/sm_table.json VLLM_BACKPORT_TARGET=sm80
export PYTHONPATH=$PWD:$PWD/engine
NCU=${NCU:-ncu}  # Nsight Compute's command line, from the device's CUDA toolkit
timeout 200 $NCU --kernel-name regex:sparse_decode --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section InstructionStats -o $OUT/prof \
  python3 tools/bench/sparse_decode_once.py --kernel-so .devcarry/base/libvllm_backport_kernels_sm80.so > $OUT/prof.log 2>&1
$NCU --import $OUT/prof.ncu-rep --page source --csv --print-source sass > $OUT/sass.csv 2> $OUT/sass.err
$NCU --import $OUT/prof.ncu-rep --page details --print-details all > $OUT/details.txt 2>&1
ls -la $OUT
