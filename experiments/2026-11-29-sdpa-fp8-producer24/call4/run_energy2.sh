#!/usr/bin/env bash
# (2026-11-29, 1x H200) Under sustained load (1.5 s of back-to-back cold launches per process): p50, SM clock and power
# of the fp8 tier at head dim 128 for the bundle of 1fafc7e, the three-probes runners hint (try_wait's suspend hint)
# and rs0 (row sums by FADD), and cuDNN FP8; experiments/2026-11-27-sdpa-clocks/clocks.py with p50 from samples_us.
set -u
export PYTHONUNBUFFERED=1
here=$(pwd)/.gpu/en2
mkdir -p /tmp/new /tmp/r && tar xzf $here/new.tgz -C /tmp/new || exit 9
for r in hint rs0; do xz -dc $here/$r.xz > /tmp/r/$r && chmod +x /tmp/r/$r || exit 9; done
cp $here/clocks.py experiments/2026-11-27-sdpa-clocks/clocks.py
export PYTHONPATH=/tmp/new/bundle:/tmp/new/bundle/site/py312 PYTHONSAFEPATH=1
new=/tmp/new/bundle/bin/sm_90/sdpa_fp8_cpasync
C="python3 experiments/2026-11-27-sdpa-clocks/clocks.py --modes cold --shapes 1x16x8192x128,2x32x4096x128 --seconds 1.5"
mkdir -p /tmp/en
{
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
$C --runner $new --out /tmp/en/new --impls ours_fp8,cudnn_fp8
$C --runner /tmp/r/hint --out /tmp/en/hint --impls ours_fp8 --label _hint
$C --runner /tmp/r/rs0 --out /tmp/en/rs0 --impls ours_fp8 --label _rs0
$C --runner $new --out /tmp/en/new_again --impls ours_fp8,cudnn_fp8 --label _again
} 2>&1 | grep -v '^{' | tee "$OUT/energy2.log"
tar czf "$OUT/energy2_raw.tgz" -C /tmp en
