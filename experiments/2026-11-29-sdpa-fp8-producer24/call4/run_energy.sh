#!/usr/bin/env bash
# (2026-11-29, 1x H200) SM clock, power and energy per launch of the fp8 tier at head dim 128: the bundle of 1fafc7e
# (the 256-key kernel at 24 / 240) and cuDNN FP8, the runner of a00f190's default build (the 128/192-key rule, main's
# kernels before) between them, then the first pair again; cold timing, experiments/2026-11-27-sdpa-clocks/clocks.py.
set -u
export PYTHONUNBUFFERED=1
here=$(pwd)/.gpu/en
mkdir -p /tmp/new && tar xzf $here/new.tgz -C /tmp/new || exit 9
xz -dc $here/old.xz > /tmp/old_runner && chmod +x /tmp/old_runner || exit 9
export PYTHONPATH=/tmp/new/bundle:/tmp/new/bundle/site/py312 PYTHONSAFEPATH=1
new=/tmp/new/bundle/bin/sm_90/sdpa_fp8_cpasync
C="python3 experiments/2026-11-27-sdpa-clocks/clocks.py --modes cold --shapes 1x16x8192x128,1x16x16384x128,2x32x4096x128 --seconds 1.5"
mkdir -p /tmp/en
{
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
$C --runner $new --out /tmp/en/new --impls ours_fp8,cudnn_fp8
$C --runner /tmp/old_runner --out /tmp/en/old --impls ours_fp8 --label _old
$C --runner $new --out /tmp/en/new_again --impls ours_fp8,cudnn_fp8 --label _again
} 2>&1 | tee "$OUT/energy.log"
tar czf "$OUT/energy_raw.tgz" -C /tmp en
