#!/usr/bin/env bash
# Device command (one call, 1x H200): from the payload folder holding ab_ps.py, bin/*.xz (the runners) and pb.tar.xz
# (a driver bundle's driver/ and site/py312/ without include/, for the cuDNN FP8 peer): bash run.sh [check] [time] [san]
set -u
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")"
python3 -c "import tarfile; tarfile.open('pb.tar.xz').extractall('/tmp/abps')"
export PYTHONPATH="/tmp/abps/pb:/tmp/abps/pb/site/py312" PYTHONSAFEPATH=1
nvidia-smi -L
timeout "${AB_TIMEOUT:-285}" python3 ab_ps.py "$@" 2>&1 | tee "$OUT/log.txt"
echo "rc=${PIPESTATUS[0]}"
