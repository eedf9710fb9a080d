#!/usr/bin/env bash
# Call 5 (2026-11-29, 1x H200): the bundle of 1fafc7e (the 256-key fp8 kernel in select_config's rule): the fp8 tier's
# accuracy at every case that now runs the 256-key kernel, every distribution, seeds 0-2, with cuDNN FP8 beside it.
set -u
export PYTHONUNBUFFERED=1
here=$(pwd)/.gpu/acc
mkdir -p /tmp/new && tar xzf $here/new.tgz -C /tmp/new || exit 9
cd /tmp/new/bundle
s=$SECONDS
timeout 420 ./run bench --suite sdpa --precision fp8 --distributions all --timing cold --rounds 1 --iters 10 --warmup 2 \
  --shapes long_d128,large_d128,1x16x16384x128,2x32x4096x128,4x16x4096x128,long_d128_causal,chunk_sq512_8k,chunk_sq2048_32k \
  --seeds 0,1,2 > "$OUT/acc.txt" 2>&1
echo "rc=$? wall_s=$((SECONDS - s))" >> "$OUT/acc.txt"
tail -3 "$OUT/acc.txt"
tar czf "$OUT/runs_acc.tgz" bench_results/2026*
