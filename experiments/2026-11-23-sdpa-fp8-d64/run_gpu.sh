#!/usr/bin/env bash
# One GPU call (see README.md), about 5 minutes on 1x H100: every build (the default "main" = the
# bundle's runners, and each bin-NAME/ candidate) checked against the float64 reference, seed 0, at
# every head-dim-64 shape and three head-dim-128 ones (a change leaking into head dim 128 fails
# there), baseline and cpasync bit for bit; timed (cold, the runners' events, p50 of ITERS) at the
# mission shape and the three large head-dim-64 shapes, with torch SDPA timed the same way in the
# same process.  Writes $OUT/log.txt, $OUT/results.jsonl; the table comes last.
# Runs from the repo root of the device machine's checkout with the carried folder .gpu/sdpa-d64.
set -o pipefail
export PYTHONUNBUFFERED=1
G=.gpu/sdpa-d64
OUT=${OUT:-/tmp/out}
TIMED=1x8x512x64,8x8x1024x64,2x16x2048x64,4x32x4096x64          # checked and timed
CHECKED=3x5x777x64,1x2x128x64,1x2x129x64,1x1x1x64,1x8x1000x64,1x3x77x128,2x16x2048x128,1x16x8192x128  # checked only
mkdir -p "$OUT"
# the candidates' runners (bin-NAME/), packed by pack.sh
BINS=${BINS:-/tmp/sdpa-d64-bins}
rm -rf "$BINS" && mkdir -p "$BINS"
tar xJf $G/variants.tar.xz -C "$BINS" 2>/dev/null || python3 -m tarfile -e $G/variants.tar.xz "$BINS"
V="main=$G/bundle/bin/sm_90"
for d in "$BINS"/bin-*; do [ -d "$d" ] && V="$V,${d##*/bin-}=$d"; done
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  echo "builds: $V"
  timeout ${CHECK_S:-470} python3 $G/repo/experiments/2026-11-23-sdpa-fp8-d64/check_variants.py --out "$OUT" \
    --variants "$V" --shapes ${SHAPES:-$TIMED,$CHECKED} --time-shapes ${TIMED_SHAPES:-$TIMED} \
    --iters ${ITERS:-50} --warmup 10 --seeds 0 --timeout 60
  echo "rc=$?"
} 2>&1 | tee "$OUT/log.txt"
