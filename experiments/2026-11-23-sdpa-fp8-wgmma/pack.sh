#!/usr/bin/env bash
# Build and pack the folder a GPU call carries (/work/main/.gpu/sdpa-fp8): a driver bundle (Python 3.12,
# with the cuDNN frontend wheel) of this worktree's build, the layout probe, NAME=DEFINE[,DEFINE] runner
# variants (bin-NAME/), and the checker.  Usage: pack.sh [NAME=DEFINE ...]
set -e
W=$(cd "$(dirname "$0")/../.." && pwd)
G=/work/main/.gpu/sdpa-fp8
E=$W/experiments/2026-11-23-sdpa-fp8-wgmma
export DRIVER_TOOLCHAIN_VENV=${DRIVER_TOOLCHAIN_VENV:-/work/main/.toolchain/venv}
rm -rf $G && mkdir -p $G/bin $G/repo/experiments
(cd $W && /work/devvenv/bin/python -m driver bundle --out $G/bundle --arch sm_90 --python 3.12 >/dev/null)
# the main build's runners are the bundle's (bundle/bin/sm_90)
nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I $W/kernels_cuda/sdpa_fp8_sm90 $E/fp8_probe.cu -o $G/bin/fp8_probe 2>/dev/null
for v in "$@"; do
  name=${v%%=*}; defs=${v#*=}; mkdir -p $G/bin-$name
  for a in baseline:0 cpasync:1; do
    nvcc -O3 -std=c++17 -gencode "arch=compute_90a,code=[sm_90a,compute_90a]" -DSDPA_SM90A=1 -DUSE_CP_ASYNC=${a#*:} \
      $(echo $defs | tr ',' '\n' | sed 's/^/-D/') $W/kernels_cuda/sdpa_fp8/runner.cu -o $G/bin-$name/sdpa_fp8_${a%%:*} 2>/dev/null
  done
done
cp $W/thresholds.toml $G/repo/
mkdir -p $G/repo/experiments/2026-11-23-sdpa-hopper
cp $W/experiments/2026-11-23-sdpa-hopper/check_and_time.py $G/repo/experiments/2026-11-23-sdpa-hopper/
cp $E/run_gpu.sh $G/run_gpu.sh
du -sh $G
