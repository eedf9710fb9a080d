#!/usr/bin/env bash
# experiments/2026-11-29-sdpa-fp8-d128-three-warpgroups on the lent machine (pb.tar.xz: the bundle's driver/ and
# site/py312/ for the cuDNN FP8 peer).
set -u
export PYTHONUNBUFFERED=1
here=$(cd "$(dirname "$0")" && pwd)
python3 -c "import tarfile; tarfile.open('$here/pb.tar.xz').extractall('/tmp/w3bpb')"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader > "$OUT/gpu.txt"
PYTHONPATH="/tmp/w3bpb/pb:/tmp/w3bpb/pb/site/py312" PYTHONSAFEPATH=1 BIN=$here/bin timeout 440 \
  python3 experiments/2026-11-29-sdpa-fp8-d128-three-warpgroups/ab.py 2 > "$OUT/log.txt" 2>&1
echo "rc=$?"; tail -3 "$OUT/log.txt"
