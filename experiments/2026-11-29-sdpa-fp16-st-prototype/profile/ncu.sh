#!/usr/bin/env bash
# Nsight Compute of the prototype's non-serialized build (st_half: st_proto.cu + half_steps.patch) at one launch each:
# pipe utilization, stall reasons and SASS-level stall samples, at b8_g8_sq8_32k (not causal) and the 2048-key case
# with and without the causal mask.  From the repository root, st_half in .gpu/st:
#   bash experiments/2026-11-29-sdpa-fp16-st-prototype/profile/ncu.sh
set -u
P=$(pwd)/.gpu/st/st_half
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || echo /usr/local/cuda/bin/ncu)
M='regex:^sm__inst_executed_pipe_[a-z0-9_]*\.avg\.pct_of_peak_sustained_active$,regex:^sm__pipe_[a-z0-9_]*_cycles_active\.avg\.pct_of_peak_sustained_active$,regex:^smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio$,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,gpu__time_duration.sum'
raw() { local name=$1; shift
  timeout 100 $NCU --clock-control none -k regex:st_kernel --launch-count 1 --metrics "$M" --csv --page raw "$P" "$@" > "$OUT/m_$name.csv" 2>&1
  echo "raw $name rc=$?"; }
src() { local name=$1; shift
  timeout 120 $NCU --clock-control none -k regex:st_kernel --launch-count 1 --section SourceCounters --section WarpStateStats \
    --import-source no --csv --page source --print-source sass "$P" "$@" | gzip -9 > "$OUT/s_$name.csv.gz"; echo "src $name rc=$?"; }
raw g8 8 64 8 32768 8 2 0 1
raw small_causal 1 32 16 2048 8 1 1 1
raw small 1 32 16 2048 8 1 0 1
src g8 8 64 8 32768 8 2 0 1
src small_causal 1 32 16 2048 8 1 1 1
ls -la "$OUT"
