#!/usr/bin/env bash
# One GPU call (1x H100, about 1-3 minutes): every build in the carried folder (bin-NAME/, pack_ab.sh)
# checked against the float64 reference (seed 0, baseline and cpasync, bit for bit too) at the
# CHECKED and TIMED shapes, timed (cold p50 of ITERS, the runners' events) at TIMED, with torch SDPA
# timed the same way in the same process.  Writes $OUT/log.txt, $OUT/results.jsonl; table last.
set -o pipefail
export PYTHONUNBUFFERED=1
G=.gpu/sdpaab
OUT=${OUT:-/tmp/out}
TIMED=${TIMED:-3x5x777x64,8x8x1024x64,2x16x2048x64,4x32x4096x64,2x16x2048x128,1x16x8192x128}
CHECKED=${CHECKED:-1x8x512x64,1x2x129x64,1x1x1x64,1x8x1000x64,1x3x77x128,2x2x1000x128}
mkdir -p "$OUT"
BINS=/tmp/sdpaab-bins; rm -rf $BINS && cp -r $G $BINS && chmod +x $BINS/bin-*/*
V=""; for d in $BINS/bin-*; do V="$V${V:+,}${d##*/bin-}=$d"; done
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  cat $G/builds.txt; echo "builds: $V"
  timeout ${CHECK_S:-400} python3 $G/repo/experiments/2026-11-23-sdpa-fp8-d64/check_variants.py --out "$OUT" \
    --variants "$V" --shapes $TIMED,$CHECKED --time-shapes $TIMED --iters ${ITERS:-100} --warmup 10 --seeds 0 --timeout 60
  echo "rc=$?"
} 2>&1 | tee "$OUT/log.txt" | grep -v "PASS\|bit-identical\|^  ("
