#!/usr/bin/env bash
# One GPU call (see README.md), about 3-4 minutes on 1x H100: every build (the default "main" = the
# bundle's runners, and each bin-NAME/ candidate) checked against the float64 reference, seed 0, at
# four head-dim-128 and two head-dim-64 shapes (a change leaking into head dim 64 fails there),
# baseline and cpasync bit for bit; the two large head-dim-128 shapes timed (cold, the runners'
# events, p50 of ITERS), with torch SDPA timed the same way in the same process.
# Writes $OUT/log.txt, $OUT/results.jsonl; the table comes last.
# Runs from the repo root of the device machine's checkout with the carried folder .gpu/d128.
set -o pipefail
export PYTHONUNBUFFERED=1
G=.gpu/d128
OUT=${OUT:-/tmp/out}
TIMED=2x16x2048x128,1x16x8192x128                      # checked and timed
CHECKED=1x3x77x128,2x2x1000x128,1x8x512x64,3x5x777x64  # checked only
mkdir -p "$OUT"
BINS=${BINS:-/tmp/sdpa-d128-bins}
rm -rf "$BINS" && mkdir -p "$BINS"
tar xJf $G/variants.tar.xz -C "$BINS" 2>/dev/null || python3 -m tarfile -e $G/variants.tar.xz "$BINS"
V="main=$G/bundle/bin/sm_90"
for d in "$BINS"/bin-*; do [ -d "$d" ] && V="$V,${d##*/bin-}=$d"; done
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  echo "builds: $V"
  timeout ${CHECK_S:-280} python3 $G/repo/experiments/2026-11-23-sdpa-fp8-d64/check_variants.py --out "$OUT" \
    --variants "$V" --shapes ${SHAPES:-$TIMED,$CHECKED} --time-shapes ${TIMED_SHAPES:-$TIMED} \
    --iters ${ITERS:-100} --warmup 10 --seeds 0 --timeout 60
  echo "rc=$?"
} 2>&1 | tee "$OUT/log.txt"
