#!/usr/bin/env bash
# Run 2, one GPU call (about 1-2 minutes on 1x H100): the run-time warpgroup rule at head dim 64 against
# the two forced policies, three builds of the same commit (bin-rule: SDPA_SM90_NCWG3_D64=1, to become the default;
# bin-two: =0; bin-three: =2, the default until then), each checked against the float64 reference, seed 0, baseline and
# cpasync (bit for bit too), at the 12 shapes of run_gpu.sh; timed (cold, the runners' events, p50 of
# ITERS) at mission, odd, batch8, large, heads32 with torch SDPA timed the same way in the same process.
# Then the launch configuration each build chose per shape (rows per block from grid and block).
# Writes $OUT/log.txt, $OUT/results.jsonl.  Runs from the repo root of the device machine's checkout
# with the carried folder .gpu/ncwg (pack2.sh).
set -o pipefail
export PYTHONUNBUFFERED=1
G=.gpu/ncwg
OUT=${OUT:-/tmp/out}
TIMED=1x8x512x64,3x5x777x64,8x8x1024x64,2x16x2048x64,4x32x4096x64    # checked and timed
CHECKED=1x2x128x64,1x2x129x64,1x1x1x64,1x8x1000x64,1x3x77x128,2x16x2048x128,1x16x8192x128  # checked only
mkdir -p "$OUT"
# the three builds' runners, copied out of the carried folder (executable bits set here)
BINS=${BINS:-/tmp/ncwg-bins}
rm -rf "$BINS" && mkdir -p "$BINS" && cp -r $G/bin-rule $G/bin-two $G/bin-three "$BINS"/ && chmod +x "$BINS"/bin-*/*
V="rule=$BINS/bin-rule,two=$BINS/bin-two,three=$BINS/bin-three"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  echo "builds: $V"
  timeout ${CHECK_S:-270} python3 $G/repo/experiments/2026-11-23-sdpa-fp8-d64/check_variants.py --out "$OUT" \
    --variants "$V" --shapes ${SHAPES:-$TIMED,$CHECKED} --time-shapes ${TIMED_SHAPES:-$TIMED} \
    --iters ${ITERS:-100} --warmup 10 --seeds 0 --timeout 60
  echo "rc=$?"
  python3 - "$OUT/results.jsonl" <<'PY'
import json, sys
print("\nconfiguration chosen (cpasync line): grid, block threads, rows per block, consumer warpgroups")
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    ln = r.get("line")
    if not ln or r.get("impl") != "cpasync":
        continue
    b, h, s, d = r["shape"]
    grid, block = ln["grid"][0], ln["block"][0]
    bm = [m for m in (64, 128, 192) if -(-s // m) * b * h == grid and (m == 192) == (block == 512)]
    print(f"  {'x'.join(map(str, r['shape'])):14s} {r['label']:6s} {ln['kernel']} grid {grid:5d} block {block} "
          f"rows/block {bm[0] if len(bm) == 1 else bm} ncwg {block // 128 - 1}")
PY
} 2>&1 | tee "$OUT/log.txt"
