#!/usr/bin/env bash
# Builds kernels_cuda/sdpa_fp8/runner.cu of the source tree $SRC (default: this checkout) for sm_90a with the
# driver's flags (driver/targets.py CUDA_FLAGS, driver/build.py: -gencode, -Xptxas -v) plus the defines given:
#   bash build.sh OUT_NAME CP_ASYNC [-DNAME=VALUE ...]
# writes $BUILD/OUT_NAME (the runner) and $BUILD/OUT_NAME.log (the ptxas report).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
SRC=${SRC:-$(cd "$here/../.." && pwd)}
BUILD=${BUILD:-/tmp/vtldsm_build}
mkdir -p "$BUILD"
name=$1; cp=$2; shift 2
impl=$([ "$cp" = 1 ] && echo cpasync || echo baseline)
nvcc -O3 -std=c++17 -lineinfo -gencode arch=compute_90a,code=[sm_90a,compute_90a] -Xptxas -v \
    -DSDPA_SM90A=1 -DUSE_CP_ASYNC="$cp" -DIMPL_NAME="$impl" "$@" \
    -o "$BUILD/$name" "$SRC/kernels_cuda/sdpa_fp8/runner.cu" >"$BUILD/$name.log" 2>&1
