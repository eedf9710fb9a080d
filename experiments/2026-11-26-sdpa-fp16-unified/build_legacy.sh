#!/usr/bin/env bash
# The legacy fp16 kernel's runners (SDPA_SM90_FP16_LEGACY=1: fp16_legacy.cuh, the fp16 tier's kernel before
# 2026-11-26; its SASS is that kernel's byte for byte) with the driver's flags, into build/legacy/.
# From the repository root; about 45 s per runner on 2 cores.
set -euo pipefail
NVCC=${NVCC:-nvcc}
mkdir -p build/legacy
for v in baseline:0 cpasync:1; do
  "$NVCC" -O3 -std=c++17 -lineinfo -gencode "arch=compute_90a,code=[sm_90a,compute_90a]" -Xptxas -v \
    -DSDPA_SM90A=1 -DUSE_CP_ASYNC=${v#*:} -DSDPA_SM90_FP16_LEGACY=1 kernels_cuda/sdpa_fp8/runner.cu \
    -o build/legacy/sdpa_fp8_${v%%:*} > build/legacy/sdpa_fp8_${v%%:*}.log 2>&1
  echo "build/legacy/sdpa_fp8_${v%%:*}: spill store bytes $(grep -o '[0-9]* bytes spill stores' build/legacy/sdpa_fp8_${v%%:*}.log | awk '{s+=$1} END {print s+0}')"
done
