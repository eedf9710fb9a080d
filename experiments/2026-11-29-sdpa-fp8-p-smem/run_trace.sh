#!/usr/bin/env bash
# Device command for call 8 (1x H200): from the payload folder holding trace.py, bin/base.xz, bin/tr.xz and the kit one
# folder up: bash run_trace.sh
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
nvidia-smi -L
timeout 200 python3 trace.py 2>&1 | tee "$OUT/log.txt"
echo "rc=${PIPESTATUS[0]}"
