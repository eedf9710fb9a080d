#!/bin/bash
# The sm_90a cubin of the SDPA runner's kernels and ptxas's report, as the driver's build compiles them (driver/targets.py
# CUDA_FLAGS, -gencode for sm_90a, SDPA_SM90A=1), without linking: for cuobjdump -sass on a host without a GPU.
#   cubin.sh REPO OUT_PREFIX USE_CP_ASYNC      -> OUT_PREFIX.cubin, OUT_PREFIX.ptxas.txt
set -e
cd "$1"
nvcc -O3 -std=c++17 -lineinfo -gencode arch=compute_90a,code=sm_90a -DSDPA_SM90A=1 -DUSE_CP_ASYNC="$3" -DIMPL_NAME=x \
  -Xptxas -v -cubin kernels_cuda/sdpa_fp8/runner.cu -o "$2.cubin" 2> "$2.ptxas.txt"
