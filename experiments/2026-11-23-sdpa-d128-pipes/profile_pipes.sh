#!/usr/bin/env bash
# One GPU call (1x H100, about 1-2 minutes): which SM pipes the FP8 Hopper SDPA kernel keeps busy at
# head dim 128.  Nsight Compute, clocks untouched (--clock-control none), one timed launch per shape
# (after the output launch) of the carried cpasync runner, the full section set plus every per-pipe
# metric (instructions issued per pipe, cycles each pipe was active), written as the raw page (CSV),
# the details page and the per-SASS-instruction source page.
#   carried: .gpu/pipes/bin (runners), this script;  SHAPES=BxHxSxD,...
set -o pipefail
G=.gpu/pipes
OUT=${OUT:-/tmp/out}
SHAPES=${SHAPES:-2x16x2048x128,1x16x8192x128}
mkdir -p "$OUT" /tmp/pipes-in
BIN=/tmp/pipes-bin; rm -rf $BIN && cp -r $G/bin $BIN && chmod +x $BIN/*
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
{
echo "ncu: $NCU ($($NCU --version | tail -1))"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
for shape in ${SHAPES//,/ }; do
  IFS=x read -r B H S D <<<"$shape"
  d=/tmp/pipes-in/$shape; mkdir -p $d
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
    --set full --import-source no \
    --metrics "regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active,regex:smsp__inst_executed_pipe_.*\.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    -f -o $rep $BIN/sdpa_fp8_cpasync $args > $OUT/ncu_$shape.log 2>&1
  echo "ncu rc=$? ($(tail -1 $OUT/ncu_$shape.log))"
  $NCU --import $rep.ncu-rep --page raw --csv > $OUT/raw_$shape.csv 2>&1
  $NCU --import $rep.ncu-rep --page details > $OUT/details_$shape.txt 2>&1
  $NCU --import $rep.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > $OUT/source_$shape.csv.gz
  rm -f $rep.ncu-rep
  python3 - $OUT/raw_$shape.csv <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
names, vals = rows[0], rows[-1]
for n, v in zip(names, vals):
    if ("pipe" in n and ("pct_of_peak" in n)) or "issue_stalled" in n or n.startswith("gpu__time_duration.sum") or "issue_active.avg.pct" in n:
        try:
            if float(v.replace(",", "")) < 0.5: continue
        except ValueError:
            continue
        print(f"  {n} = {v}")
PY
done
} 2>&1 | tee $OUT/log.txt
