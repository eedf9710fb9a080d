#!/usr/bin/env bash
# Device command (one call, 1x H200): from the payload folder holding ab256.py, bin/*.xz (the runners) and pb/ (the
# driver bundle's driver/ and site/py312/, for the cuDNN FP8 peer): bash run.sh
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
export PYTHONPATH="$PWD/pb:$PWD/pb/site/py312"
nvidia-smi -L
timeout 285 python3 ab256.py 2>&1 | tee "$OUT/log.txt"
echo "rc=${PIPESTATUS[0]}"
