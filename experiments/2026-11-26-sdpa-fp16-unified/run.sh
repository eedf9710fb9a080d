#!/usr/bin/env bash
# The device command: time the fp16 tier of two runner builds at the 7 default bench shapes, cold and hot,
# and check that their outputs agree (compare.py).  From the repository root:
#   bash experiments/2026-11-26-sdpa-fp16-unified/run.sh NEW_RUNNER LEGACY_RUNNER [OUT_DIR]
# e.g. NEW_RUNNER = build/sm_90/sdpa_fp8_cpasync (python -m driver build --arch sm_90 --targets sdpa) and
# LEGACY_RUNNER = build/legacy/sdpa_fp8_cpasync (build_legacy.sh).  Extra compare.py flags via ARGS.
set -euo pipefail
NEW=${1:?new runner}
LEGACY=${2:?legacy runner}
OUT=${3:-${OUT:-/tmp/sdpa-fp16-unified}}
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true
for b in "$NEW" "$LEGACY"; do echo "$b: $(sha256sum "$b" | cut -c1-16)"; done
$PY "$(dirname "$0")/compare.py" --new "$NEW" --legacy "$LEGACY" --out "$OUT" ${ARGS:-} 2>&1 | tee "$OUT.log"
