#!/usr/bin/env bash
# SDPA_DECODE_SHARED_TILE A/B (experiments/2026-11-29-sdpa-decode-shared-tile), one device call on 1x H200:
#   cd .gpu/decshare && timeout 280 bash run.sh
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/decshare_out}; mkdir -p "$OUT"
nvidia-smi -L
python3 ab.py 2>&1 | tee "$OUT/log.txt"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/log.txt"
