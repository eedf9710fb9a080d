#!/usr/bin/env bash
# The device command of each run (1x H100, carry [".gpu/sdpaab"] as packed by
#   REF_BIN=<runners of 9233a33> experiments/2026-11-23-sdpa-fp8-profile/pack_ab.sh new= p0=SDPA_SM90_TILE_PLAN=0 [p2=SDPA_SM90_TILE_PLAN=2]
# ): the cold pass of run_ab.sh (float64 gate, bit comparison, torch SDPA timed in the same process),
# then a hot pass of ours (CUDA graph of 20, --split 0 only to get the "tiles" key on each line).
export TIMED=3x5x777x64,8x8x1024x64,2x16x2048x64,4x32x4096x64,2x16x2048x128,1x16x8192x128,1x8x512x64
OUT=$OUT/cold TIMED=$TIMED bash .gpu/sdpaab/run_ab.sh
V=""; for d in /tmp/sdpaab-bins/bin-*; do V="$V${V:+,}${d##*/bin-}=$d"; done
timeout 250 python3 .gpu/sdpaab/repo/experiments/2026-11-23-sdpa-fp8-d64/check_variants.py --out $OUT/hot \
  --variants "$V" --shapes $TIMED --time-shapes $TIMED --iters 50 --warmup 10 --seeds 0 --timeout 60 --no-torch \
  --runner-args "--split 0 --timing hot" > $OUT/hot_log.txt 2>&1
echo rc=$?
