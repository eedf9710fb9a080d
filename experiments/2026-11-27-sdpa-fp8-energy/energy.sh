#!/usr/bin/env bash
# Device command: SM clock and power of the fp8 tier at head dim 128, whole kernel and math alone (the runner's
# --ablate no_loads), for the default build and three builds that change one part of the consumer loop, with
# cuDNN FP8 before and after; cold only. From the repository root, the bundle unpacked at bundle/ and its Python
# path set (PYTHONPATH=$PWD/bundle:$PWD/bundle/site/py312 PYTHONSAFEPATH=1):
#   bash experiments/2026-11-27-sdpa-fp8-energy/energy.sh OUT_DIR VARIANT_DIR
# VARIANT_DIR holds rowsum0, bn128 and poly4 (README.md says how each is built).
set -euo pipefail
OUT=${1:?out dir}
B=${2:?dir with the rowsum0, bn128 and poly4 runners}
R=bundle/bin/sm_90/sdpa_fp8_cpasync
C="python3 experiments/2026-11-27-sdpa-clocks/clocks.py --modes cold --shapes 1x16x8192x128,2x16x2048x128 --seconds 1.5"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
$C --runner $R --out "$OUT/ref" --impls ours_fp8,cudnn_fp8 | tail -4
$C --runner $R --out "$OUT/ref_no_loads" --impls ours_fp8 --runner-args "--ablate no_loads" --label _no_loads | tail -2
$C --runner $R --out "$OUT/ref_no_compute" --impls ours_fp8 --runner-args "--ablate no_compute" --label _no_compute | tail -2
for v in rowsum0 bn128 poly4; do
  $C --runner "$B/$v" --out "$OUT/$v" --impls ours_fp8 --label "_$v" | tail -2
  $C --runner "$B/$v" --out "$OUT/${v}_no_loads" --impls ours_fp8 --runner-args "--ablate no_loads" --label "_${v}_no_loads" | tail -2
done
$C --runner $R --out "$OUT/ref_again" --impls ours_fp8,cudnn_fp8 --label _again | tail -4
