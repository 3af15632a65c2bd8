#!/usr/bin/env bash
set -u
export VLLM_BACKPORT_SM_TABLE=.devcarry/base/sm_table.json VLLM_BACKPORT_TARGET=sm80
export PYTHONPATH=$PWD:$PWD/engine
timeout 60 python3 tools/bench/sparse_decode_once.py --kernel-so .devcarry/occ/libvllm_backport_kernels_sm80.so > $OUT/occ.log 2>&1
NCU=${NCU:-ncu}  # Nsight Compute's command line, from the device's CUDA toolkit
for build in base new; do
  timeout 150 $NCU --kernel-name regex:sparse_decode --launch-skip 1 --launch-count 1 \
    --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section SpeedOfLight \
    python3 tools/bench/sparse_decode_once.py --kernel-so .devcarry/$build/libvllm_backport_kernels_sm80.so > $OUT/ncu-$build.txt 2>&1
done
#!/usr/bin/env bash
set -u
export VLLM_BACKPORT_SM_TABLE=.devcarry/base/sm_table.json VLLM_BACKPORT_TARGET=sm80
export PYTHONPATH=$PWD:$PWD/engine
NCU=${NCU:-ncu}  # Nsight Compute's command line, from the device's CUDA toolkit
M='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum,sm__cycles_active.avg,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_xu.sum,smsp__inst_executed_op_ldsm.sum,smsp__inst_executed_op_global_ld.sum,smsp__inst_executed_op_ldgsts.sum'
for build in base new; do
  timeout 150 $NCU --kernel-name regex:sparse_decode --launch-skip 1 --launch-count 1 --metrics "$M" \
    python3 tools/bench/sparse_decode_once.py --kernel-so .devcarry/$build/libvllm_backport_kernels_sm80.so > $OUT/stall-$build.txt 2>&1
done
timeout 150 $NCU --kernel-name regex:sparse_decode --launch-skip 1 --launch-count 1 --metrics "$M" \
    python3 tools/bench/sparse_decode_once.py --kernel-so .devcarry/base/libvllm_backport_kernels_sm80.so --batch 1 --heads 64 > $OUT/stall-base-b1.txt 2>&1
