#!/usr/bin/env bash
# Device command (one call, 1x H200), from the payload folder holding ab_vt.py and bin/*.xz:
#   cd .gpu/vtldsm && AB_BUDGET_S=270 AB_ROUNDS=2 timeout 290 bash run.sh
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
nvidia-smi -L
python3 ab_vt.py 2>&1 | tee "$OUT/log.txt"
echo "rc=${PIPESTATUS[0]}"
