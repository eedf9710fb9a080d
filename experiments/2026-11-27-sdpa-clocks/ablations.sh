#!/usr/bin/env bash
# Device command of call 3: clock and power of the Hopper kernels' parts at head dim 128 (the runner's
# ablations: no_loads = the math on the first K/V tile for every tile; no_compute = the loads, decode and V
# transpose for every tile, no softmax or P V), the fp8 tier with 128-key tiles everywhere (BN128, a build
# with -DSDPA_SM90_BN_D128=128), and cuDNN FP8 / torch SDPA for reference, cold only. From the repository root
# with the bundle unpacked at bundle/ and its Python path set:
#   bash experiments/2026-11-27-sdpa-clocks/ablations.sh OUT_DIR BN128_RUNNER
set -euo pipefail
OUT=${1:?out dir}
BN128=${2:?runner built with -DSDPA_SM90_BN_D128=128}
R=bundle/bin/sm_90/sdpa_fp8_cpasync
C="python3 $(dirname "$0")/clocks.py --modes cold --shapes 1x16x8192x128,2x16x2048x128 --seconds 1.5"
$C --runner $R --out "$OUT/ref" --impls ours_fp8,cudnn_fp8,ours_fp16,torch_sdpa | tail -10
$C --runner $R --out "$OUT/no_loads" --impls ours_fp8,ours_fp16 --runner-args "--ablate no_loads" --label _no_loads | tail -6
$C --runner $R --out "$OUT/no_compute" --impls ours_fp8,ours_fp16 --runner-args "--ablate no_compute" --label _no_compute | tail -6
$C --runner "$BN128" --out "$OUT/bn128" --impls ours_fp8 --label _bn128 | tail -4
