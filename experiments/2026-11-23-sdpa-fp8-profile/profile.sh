#!/usr/bin/env bash
# One GPU call (1x H100, about 2-3 minutes): Nsight Compute profile of the FP8 Hopper SDPA kernel
# (wgmma_fp8_sm90, cpasync runner) at the shapes where it trails its peers, one timed launch each
# (after the output launch; L2 flushed before it by the runner), clocks left alone (--clock-control
# none).  Per shape: the full section set as text (details.txt), per-SASS-instruction warp-stall
# samples (source.csv) and the report (.ncu-rep).  Runs from the repo root of the device machine's
# checkout with the carried folder .gpu/prof (pack.sh): bin/ (runners) and this script.
#   SHAPES=BxHxSxD,... (default: large d64 and d128, batch8)
set -o pipefail
G=.gpu/prof
OUT=${OUT:-/tmp/out}
SHAPES=${SHAPES:-2x16x2048x64,2x16x2048x128,8x8x1024x64}
mkdir -p "$OUT" /tmp/prof-in
BIN=/tmp/prof-bin; rm -rf $BIN && cp -r $G/bin $BIN && chmod +x $BIN/*
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
{
echo "ncu: $NCU ($($NCU --version | tail -1))"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
for shape in ${SHAPES//,/ }; do
  IFS=x read -r B H S D <<<"$shape"
  d=/tmp/prof-in/$shape; mkdir -p $d
  python3 - "$d" $B $H $S $D <<'PY'
import sys, numpy as np, torch
d, (B, H, S, D) = sys.argv[1], map(int, sys.argv[2:])
g = torch.Generator().manual_seed(0)
q = torch.randn(B, H, S, D, generator=g).half()
k = (torch.randn(B, H, S, D, generator=g) * 2).to(torch.float8_e4m3fn).view(torch.uint8)
v = (torch.randn(B, H, S, D, generator=g) * 2).to(torch.float8_e4m3fn).view(torch.uint8)
np.save(f"{d}/q.npy", q.numpy()); np.save(f"{d}/k.npy", k.numpy()); np.save(f"{d}/v.npy", v.numpy())
np.save(f"{d}/scales.npy", np.array([0.5, 0.5], np.float32))
PY
  args="--q $d/q.npy --k $d/k.npy --v $d/v.npy --scales $d/scales.npy --out $d/o.npy --iters 1 --warmup 0 --no-spin"
  echo "== $shape: runner line"; $BIN/sdpa_fp8_cpasync $args
  rep=$OUT/prof_$shape
  timeout 200 $NCU --clock-control none -k regex:sdpa_fp8_sm90_kernel --launch-skip 1 --launch-count 1 \
    --set full --import-source no -f -o $rep $BIN/sdpa_fp8_cpasync $args > $OUT/ncu_$shape.log 2>&1
  echo "ncu rc=$? ($(tail -1 $OUT/ncu_$shape.log))"
  $NCU --import $rep.ncu-rep --page details > $OUT/details_$shape.txt 2>&1
  $NCU --import $rep.ncu-rep --page source --csv --print-source sass > $OUT/source_$shape.csv 2>&1 || echo "source page: rc=$?"
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|Issued Ipc Active|No Eligible|Warp Cycles Per Issued|Registers Per|Achieved Occupancy" $OUT/details_$shape.txt | head -20
done
} 2>&1 | tee $OUT/log.txt
